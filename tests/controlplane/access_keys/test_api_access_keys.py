"""Access key pairs through the IAM API and the command line: the secret is shown once and kept
only sealed under the master key; a pair signs as its principal until it is revoked, which
every process sees at once; charlie never sees or revokes alice's."""

from __future__ import annotations

import base64
import io
import json
import time

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection

from controlplane.access_keys import authentication
from controlplane.access_keys.authentication import caller_of
from controlplane.access_keys.models import AccessKey
from controlplane.access_keys.sigv4 import SigV4Error
from controlplane.audit.models import AuditEvent
from controlplane.pg_listen import connect_params
from controlplane.process_cache import CHANNEL
from tests.aws.signing import as_django, signed
from tests.support.callers import Person

pytestmark = pytest.mark.django_db


def _signs_as(key_id: str, secret: str) -> str:
    return caller_of(as_django(signed(key_id, secret))).principal.arn


def test_a_pair_is_shown_once_sealed_and_signs_as_its_owner(bob: Person) -> None:
    r = bob.post("iam/access-keys", {"name": "boto3", "expires_in_days": 30})
    assert r.status_code == 201, r.content
    made = r.json()
    key_id, secret = made["access_key_id"], made["secret_access_key"]
    assert key_id.startswith("LWAK") and len(key_id) == 20 and len(secret) == 43
    assert made["principal"].endswith(":user/bob@example.com") and made["status"] == "active"
    stored = AccessKey.objects.get(access_key_id=key_id)
    material = base64.b64decode(secret + "=")
    assert secret.encode() not in bytes(stored.sealed_secret)
    assert material not in bytes(stored.sealed_secret)
    with connection.cursor() as cur:  # nowhere in the row, in any column
        cur.execute("SELECT * FROM access_keys_accesskey WHERE access_key_id = %s", [key_id])
        row = cur.fetchone()
    assert not any(
        secret in str(v) or material in bytes(v) for v in row if isinstance(v, bytes | memoryview)
    )
    assert not any(secret in str(v) for v in row)
    listed = bob.get("iam/access-keys").json()["access_keys"]
    assert [k["access_key_id"] for k in listed] == [key_id]
    assert secret not in json.dumps(listed)
    assert _signs_as(key_id, secret).endswith(":user/bob@example.com")
    assert AuditEvent.objects.filter(action="iam:CreateAccessKey", allowed=True).exists()


def test_revocation(alice: Person, bob: Person, charlie: Person) -> None:
    made = bob.post("iam/access-keys", {"name": "k"}).json()
    key_id, secret = made["access_key_id"], made["secret_access_key"]
    assert _signs_as(key_id, secret)
    assert charlie.post(f"iam/access-keys/{key_id}/revoke").status_code == 404
    assert _signs_as(key_id, secret)
    r = bob.post(f"iam/access-keys/{key_id}/revoke")
    assert r.status_code == 200 and r.json()["status"] == "revoked"
    with pytest.raises(SigV4Error) as refused:
        _signs_as(key_id, secret)
    assert refused.value.code == "UnrecognizedClientException"
    assert secret not in refused.value.message
    assert AuditEvent.objects.filter(action="iam:RevokeAccessKey", allowed=True).exists()


def test_a_member_revokes_only_their_own(alice: Person, bob: Person) -> None:
    alices = alice.post("iam/access-keys", {"name": "mine"}).json()["access_key_id"]
    r = bob.post(f"iam/access-keys/{alices}/revoke")
    assert r.status_code == 403 and "iam:RevokeAccessKey" in r.json()["detail"]
    bobs = bob.post("iam/access-keys", {"name": "b"}).json()["access_key_id"]
    assert alice.post(f"iam/access-keys/{bobs}/revoke").status_code == 200  # the owner may


def test_a_role_pair_needs_the_roles_trust(alice: Person) -> None:
    r = alice.post("iam/access-keys", {"name": "ci", "role_arn": alice.role_arn})
    assert r.status_code == 400 and "trust policy" in r.json()["detail"]


def test_bad_bodies_name_the_field(alice: Person) -> None:
    assert alice.post("iam/access-keys", {}).json()["field"] == "name"
    r = alice.post("iam/access-keys", {"name": "x", "expires_in_days": 0})
    assert r.json()["field"] == "expires_in_days"
    r = alice.post("iam/access-keys", {"name": "x", "secret_access_key": "mine"})
    assert r.status_code == 400 and r.json()["field"] == "secret_access_key"


def test_a_member_leaving_revokes_their_pairs(alice: Person, bob: Person) -> None:
    made = bob.post("iam/access-keys", {"name": "k"}).json()
    assert alice.client.delete("/api/v1/iam/users/bob@example.com").status_code == 204
    with pytest.raises(SigV4Error):
        _signs_as(made["access_key_id"], made["secret_access_key"])
    assert AccessKey.objects.get(access_key_id=made["access_key_id"]).revoked_at is not None


def test_the_command_line_prints_a_pair_for_a_role(alice: Person) -> None:
    out = io.StringIO()
    call_command(
        "create_access_key",
        "--account",
        alice.tenant.account_id,
        "--role",
        "LoopwrightSessionRole",
        "--json",
        stdout=out,
    )
    made = json.loads(out.getvalue())
    assert set(made) == {"access_key_id", "secret_access_key"}
    assert _signs_as(made["access_key_id"], made["secret_access_key"]) == alice.role_arn
    event = AuditEvent.objects.get(action="iam:CreateAccessKey")
    assert event.principal == "system:operator" and made["access_key_id"] in event.resource
    assert made["secret_access_key"] not in event.reason


def test_another_process_announcing_a_change_empties_the_cache(alice: Person) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the caches are used on PostgreSQL only")
    made = alice.post("iam/access-keys", {"name": "k"}).json()
    _signs_as(made["access_key_id"], made["secret_access_key"])
    assert len(authentication._resolved) == 1
    with psycopg.connect(autocommit=True, **connect_params()) as conn:
        conn.execute("SELECT pg_notify(%s, '')", [CHANNEL])
    deadline = time.monotonic() + 5
    while len(authentication._resolved) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(authentication._resolved) == 0
