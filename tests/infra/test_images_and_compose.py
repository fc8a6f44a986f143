"""The images and the compose file, checked without a Docker engine: hadolint on the
Dockerfiles, the compose file against the compose specification's JSON schema (the copy
check-jsonschema vendors), every command of both against the repository, the pinned
requirements against the project's own lists."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path

import jsonschema
import pytest
import yaml
from packaging.requirements import Requirement

from .commands import ROOT, check

INFRA = ROOT / "infra"
DOCKERFILES = sorted((INFRA / "images").glob("*.Dockerfile"))
COMPOSE = INFRA / "compose.yaml"


def compose_schema() -> dict:
    vendored = resources.files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json"
    return json.loads(vendored.read_text())


def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def test_hadolint_passes_every_dockerfile() -> None:
    assert len(DOCKERFILES) == 2
    hadolint = Path(sys.executable).parent / "hadolint"
    done = subprocess.run([str(hadolint), *map(str, DOCKERFILES)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_images_run_as_a_user_and_check_their_health(dockerfile: Path) -> None:
    text = dockerfile.read_text()
    last_stage = text.split("\nFROM ")[-1]
    assert re.search(r"^USER 10001:10001$", last_stage, re.M)
    assert "HEALTHCHECK" in last_stage
    assert text.count("\nFROM ") >= 2  # multi-stage: build tools stay behind


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_image_commands_exist(dockerfile: Path) -> None:
    cmd = re.search(r"^CMD (\[.*\])$", dockerfile.read_text(), re.M)
    assert cmd
    check(json.loads(cmd.group(1)))


def test_the_compose_file_follows_the_compose_specification() -> None:
    jsonschema.validate(compose(), compose_schema())
    wrong = compose()
    wrong["services"]["controlplane"]["stop_grace_period"] = ["90s"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(wrong, compose_schema())


def test_the_compose_stack_has_every_part() -> None:
    services = compose()["services"]
    assert {"postgres", "redis", "migrate", "controlplane", "housekeeping"} <= services.keys()
    workers = [s for s in services.values() if s.get("command") == ["python3", "-m", "workers.run"]]
    assert len(workers) == 2
    assert services["migrate"]["restart"] == "no"
    for name in ("controlplane", "housekeeping", *[n for n in services if n.startswith("worker")]):
        assert services[name]["depends_on"]["migrate"] == {
            "condition": "service_completed_successfully"
        }
    grace = int(workers[0]["stop_grace_period"].removesuffix("s"))
    assert grace > 60  # above LOOPWRIGHT_WORKER_STOP_SECONDS: they hand their models over
    assert "noeviction" in services["redis"]["command"]
    assert "-B" in services["housekeeping"]["command"]


def test_compose_commands_exist() -> None:
    commands = {json.dumps(s["command"]) for s in compose()["services"].values() if "build" in s}
    assert len(commands) == 4  # migrate, gunicorn, workers.run, celery beat
    for command in sorted(commands):
        check(json.loads(command))


@pytest.mark.parametrize("image,extras", [("server", ["server"]), ("worker", ["server", "worker"])])
def test_pinned_requirements_satisfy_the_projects_lists(image: str, extras: list[str]) -> None:
    pins = {}
    for line in (INFRA / "images" / f"requirements-{image}.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[name] = version
    project = __import__("tomllib").loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"])
    for extra in extras:
        wanted += project["optional-dependencies"][extra]
    for line in wanted:
        req = Requirement(line)
        if req.name in ("loopwright", "torch"):  # from source; from the variant's index
            continue
        name = req.name.lower().replace("_", "-")
        assert name in pins, f"{req.name} is not pinned for the {image} image"
        assert req.specifier.contains(pins[name], prereleases=True), (req, pins[name])


@pytest.mark.parametrize(
    "command",
    [
        ["python", "manage.py", "no_such_command"],
        ["python", "-m", "workers.no_such_module"],
        ["celery", "-A", "controlplane.no_such_app", "worker"],
        ["gunicorn", "controlplane.wsgi:application", "--no-such-flag"],
        ["nginx"],
    ],
)
def test_a_command_the_repository_lacks_is_caught(command: list[str]) -> None:
    with pytest.raises(AssertionError):
        check(command)
