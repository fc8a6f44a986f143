"""``LOOPWRIGHT_TLS_PROXY``: behind the TLS proxy the proxy's ``X-Forwarded-Proto`` makes
``loopwright:SecureTransport`` true and brings Secure cookies, HSTS and the HTTPS redirect
(probes excepted); without it that header is never believed, whoever sends it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """
import json, django
django.setup()
from django.test import Client, RequestFactory
from controlplane.iam.access import request_context
from controlplane.iam.principals import Principal
from controlplane.tenants.models import Tenant

def secure(**headers):
    request = RequestFactory().get("/api/v1/healthz", **headers)
    principal = Principal(tenant=Tenant(name="t"), arn="arn:loopwright:iam::1:user/u")
    return request_context(principal, request)["loopwright:SecureTransport"]

plain = Client().get("/login")
proxied = Client().get("/login", HTTP_X_FORWARDED_PROTO="https")
probe = Client().get("/api/v1/healthz")
print(json.dumps({
    "forwarded": secure(HTTP_X_FORWARDED_PROTO="https"),
    "plain": secure(),
    "plain_status": plain.status_code,
    "hsts": proxied.headers.get("Strict-Transport-Security", ""),
    "csrf_cookie_secure": bool(proxied.cookies.get("csrftoken") and proxied.cookies["csrftoken"]["secure"]),
    "probe_status": probe.status_code,
}))
"""


def run(tls_proxy: str, tmp_path: Path) -> dict:
    env = {**os.environ, "LOOPWRIGHT_TLS_PROXY": tls_proxy, "LOOPWRIGHT_DATA_DIR": str(tmp_path)}
    env.pop("DATABASE_URL", None)  # no database is touched
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_behind_the_tls_proxy_its_header_is_believed(tmp_path) -> None:
    seen = run("true", tmp_path)
    assert seen["forwarded"] is True and seen["plain"] is False
    assert seen["plain_status"] == 301  # plain HTTP is sent to HTTPS
    assert seen["hsts"].startswith("max-age=31536000") and "includeSubDomains" in seen["hsts"]
    assert seen["csrf_cookie_secure"] is True
    assert seen["probe_status"] == 200  # probes reach the pods in plain HTTP


@pytest.mark.parametrize("tls_proxy", ["false", ""])
def test_without_it_nobody_can_claim_https(tls_proxy, tmp_path) -> None:
    seen = run(tls_proxy, tmp_path)
    assert seen["forwarded"] is False and seen["plain"] is False
    assert seen["plain_status"] == 200 and seen["hsts"] == ""
    assert seen["csrf_cookie_secure"] is False
