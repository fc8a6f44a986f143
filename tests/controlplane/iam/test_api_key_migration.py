"""API keys moved from the tenants app to IAM without touching their table: a fresh PostgreSQL
database migrated to the state before the move, with keys made there by the models of that
state, migrates forwards; the live key still authenticates as its member, the revoked one stays
revoked, and the key model keeps its content type."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SERVER = os.environ.get("DATABASE_URL", "")

pytestmark = pytest.mark.skipif(
    not SERVER.startswith(("postgres://", "postgresql://")),
    reason="runs the migrations on a fresh PostgreSQL database (DATABASE_URL names the server)",
)

# Run in a process of its own against the fresh database: migrate to the state before the move,
# make two keys there with that state's models (one revoked), migrate to the end, then ask the
# current code what the keys are.
SCRIPT = r"""
import json, sys
import django
django.setup()
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

BEFORE = [("tenants", "0004_storage_locations"), ("iam", "0002_user_policies")]
for app, name in BEFORE:
    call_command("migrate", app, name, verbosity=0)
applied = MigrationExecutor(connection).loader.applied_migrations
assert ("tenants", "0005_api_keys_to_iam") not in applied and ("iam", "0003_api_keys") not in applied

old = MigrationExecutor(connection).loader.project_state(BEFORE, at_end=True).apps
from controlplane.tenants.services import key_digest

tenant = old.get_model("tenants", "Tenant").objects.create(name="acme", account_id="123456789012")
user = old.get_model("auth", "User").objects.create(username="alice@example.com", password="!")
old.get_model("tenants", "Membership").objects.create(tenant=tenant, user=user, role="owner")
OldKey = old.get_model("tenants", "ApiKey")
raw = {}
for name, revoked in (("laptop", None), ("old ci", timezone.now())):
    raw[name] = f"tml-{name[:3].replace(' ', '')}000000000.secret-{name.replace(' ', '-')}"
    OldKey.objects.create(
        tenant=tenant, user=user, name=name, prefix=raw[name].split(".")[0],
        digest=key_digest(raw[name]), revoked_at=revoked,
    )
ContentType = old.get_model("contenttypes", "ContentType")
before_type = ContentType.objects.get(app_label="tenants", model="apikey").pk

call_command("migrate", verbosity=0)

from django.contrib.contenttypes.models import ContentType as CurrentType
from django.test import RequestFactory
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from controlplane.iam.authentication import ApiKeyAuthentication
from controlplane.iam.models import ApiKey
from controlplane.iam.selectors import api_key_for, api_keys

def authenticate(key):
    request = Request(RequestFactory().get("/api/v1/healthz", HTTP_X_API_KEY=key))
    try:
        principal, row = ApiKeyAuthentication().authenticate(request)
    except AuthenticationFailed as exc:
        return {"refused": str(exc.detail)}
    return {"arn": principal.arn, "prefix": row.prefix, "tenant": principal.tenant.name}

print(json.dumps({
    "table": ApiKey._meta.db_table,
    "keys": sorted(k.name for k in api_keys(tenant=api_key_for(raw["laptop"]).tenant)),
    "live": authenticate(raw["laptop"]),
    "revoked": authenticate(raw["old ci"]),
    "wrong_secret": authenticate(raw["laptop"] + "x"),
    "content_type_kept": CurrentType.objects.get_for_model(ApiKey).pk == before_type,
    "stale_types": CurrentType.objects.filter(app_label="tenants", model="apikey").count(),
}))
"""


@pytest.fixture
def fresh_database():
    import psycopg

    server = SERVER.replace("postgres://", "postgresql://", 1).rsplit("/", 1)[0]
    name = f"lw_key_move_{secrets.token_hex(4)}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{server}/{name}"
    finally:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_key_made_before_the_move_authenticates_after_it(fresh_database) -> None:
    env = {
        **os.environ,
        "DATABASE_URL": fresh_database,
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "sdk")]),
        "DJANGO_SECRET_KEY": secrets.token_hex(16),
    }
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["table"] == "tenants_apikey"
    assert found["keys"] == ["laptop", "old ci"]
    assert found["live"] == {
        "arn": "arn:loopwright:iam::123456789012:user/alice@example.com",
        "prefix": "tml-lap000000000",
        "tenant": "acme",
    }
    assert found["revoked"] == {"refused": "invalid, revoked or expired API key"}
    assert found["wrong_secret"] == {"refused": "invalid, revoked or expired API key"}
    assert found["content_type_kept"] is True
    assert found["stale_types"] == 0
