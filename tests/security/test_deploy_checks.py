"""``manage.py check --deploy`` has nothing to say under the production environment of
``infra/compose.yaml`` and of the Helm chart (TLS proxy on, DEBUG off, secrets of their own), and
both turn the TLS setting on; without it the same check warns (so the test can fail)."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import yaml

from tests.infra.helm_render import render
from tests.infra.test_helm_chart import CHART, REQUIRED, containers, env, of_kind

ROOT = Path(__file__).resolve().parents[2]
SECRETS = {
    "DJANGO_SECRET_KEY": secrets.token_urlsafe(48),
    "LOOPWRIGHT_KMS_MASTER_KEY": secrets.token_urlsafe(48),
    "POSTGRES_PASSWORD": "pw",
    "REDIS_PASSWORD": "pw",
    "LOOPWRIGHT_METRICS_TOKEN": secrets.token_urlsafe(24),
}
_VARIABLE = re.compile(r"\$\{(\w+)(?::([?-])([^${}]*))?\}")


def interpolate(value: str, given: dict[str, str]) -> str:
    """Compose's ``${VAR}``, ``${VAR:-default}`` and ``${VAR:?error}``, nested ones first."""

    def one(m: re.Match) -> str:
        name, kind, rest = m[1], m[2], m[3] or ""
        if given.get(name):
            return given[name]
        assert kind == "-", f"{name} must be set ({rest})"
        return rest

    while _VARIABLE.search(value):
        value = _VARIABLE.sub(one, value)
    return value


def check_deploy(environment: dict[str, str]) -> subprocess.CompletedProcess:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "LOOPWRIGHT_"))}
    keep.pop("DATABASE_URL", None)
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env={**keep, "PYTHONPATH": str(ROOT), **environment},
        capture_output=True,
        text=True,
        timeout=120,
    )


def compose_environment() -> dict[str, str]:
    compose = yaml.safe_load((ROOT / "infra" / "compose.yaml").read_text())
    service = compose["services"]["controlplane"]["environment"]
    return {k: interpolate(str(v), SECRETS) for k, v in service.items()}


def chart_environment() -> dict[str, str]:
    values = {**REQUIRED, "secrets": {"djangoSecretKey": SECRETS["DJANGO_SECRET_KEY"], "kmsMasterKey": SECRETS["LOOPWRIGHT_KMS_MASTER_KEY"]}}  # fmt: skip
    docs = render(CHART, values)
    config = of_kind(docs, "ConfigMap")[0]["data"]
    secret = of_kind(docs, "Secret")[0]["stringData"]
    deployment = next(d for d in of_kind(docs, "Deployment") if d["metadata"]["name"].endswith("controlplane"))  # fmt: skip
    container = next(c for c in containers(deployment) if c["name"] == "controlplane")
    found = dict(config)
    for name, value in env(container).items():
        if isinstance(value, str):
            found[name] = value
        elif name in secret:
            found[name] = secret[value["secretKeyRef"]["key"]]
    found.pop("PROMETHEUS_MULTIPROC_DIR")  # a folder the pod's gunicorn makes: not a setting
    return found


def test_the_compose_file_passes_the_deploy_checks() -> None:
    environment = compose_environment()
    assert environment["LOOPWRIGHT_TLS_PROXY"] == "true" and "DJANGO_DEBUG" not in environment
    done = check_deploy(environment)
    assert done.returncode == 0 and "no issues" in done.stdout, done.stdout + done.stderr[-3000:]


def test_the_chart_passes_the_deploy_checks() -> None:
    environment = chart_environment()
    assert environment["LOOPWRIGHT_TLS_PROXY"] == "true"
    assert environment["DJANGO_SECRET_KEY"] == SECRETS["DJANGO_SECRET_KEY"]
    done = check_deploy(environment)
    assert done.returncode == 0 and "no issues" in done.stdout, done.stdout + done.stderr[-3000:]


def test_without_tls_the_deploy_checks_warn() -> None:
    done = check_deploy({**compose_environment(), "LOOPWRIGHT_TLS_PROXY": "false"})
    assert done.returncode != 0
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in done.stderr + done.stdout
