"""What an API key resolves to is reused between requests, and any IAM change is seen at once:
a revoked key, a removed member, a new deny policy, a change made by another process."""

from __future__ import annotations

import time

import psycopg
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from controlplane.iam import credential_cache
from controlplane.pg_listen import connect_params

pytestmark = pytest.mark.django_db

DENY_SESSIONS = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Deny", "Action": "sessions:*", "Resource": "*"}],
}


@pytest.fixture(autouse=True)
def _postgres_only():
    if connection.vendor != "postgresql":
        pytest.skip("the credential cache is used on PostgreSQL only")
    credential_cache.cache.clear()


def _key_lookups(person) -> int:
    with CaptureQueriesContext(connection) as q:
        assert person.get("sessions").status_code == 200
    return sum('FROM "tenants_apikey"' in x["sql"] for x in q.captured_queries)


def test_a_second_request_skips_the_key_lookup(alice) -> None:
    assert _key_lookups(alice) == 1
    assert _key_lookups(alice) == 0


def test_off_when_configured(alice, settings) -> None:
    settings.AUTH_CACHE_SECONDS = 0
    assert _key_lookups(alice) == 1
    assert _key_lookups(alice) == 1


def test_a_revoked_key_is_refused_on_the_next_request(alice) -> None:
    made = alice.post("iam/api-keys", {"name": "spare"}).json()
    from rest_framework.test import APIClient

    spare = APIClient()
    spare.credentials(HTTP_X_API_KEY=made["api_key"])
    assert spare.get("/api/v1/sessions").status_code == 200
    assert spare.get("/api/v1/sessions").status_code == 200  # now served from the cache
    assert alice.post(f"iam/api-keys/{made['prefix']}/revoke").status_code == 200
    assert spare.get("/api/v1/sessions").status_code == 401


def test_a_new_deny_policy_applies_on_the_next_request(alice, bob) -> None:
    assert bob.get("sessions").status_code == 200
    r = alice.client.put(
        "/api/v1/iam/users/bob@example.com/policies/no-sessions",
        {"document": DENY_SESSIONS},
        format="json",
    )
    assert r.status_code in (200, 201), r.content
    assert bob.get("sessions").status_code == 403


def test_a_removed_member_is_refused_on_the_next_request(alice, bob) -> None:
    assert bob.get("sessions").status_code == 200
    assert alice.client.delete("/api/v1/iam/users/bob@example.com").status_code in (200, 204)
    assert bob.get("sessions").status_code == 401


def test_a_change_announced_by_another_process_empties_the_cache(alice) -> None:
    alice.get("sessions")
    assert len(credential_cache.cache) == 1
    with psycopg.connect(autocommit=True, **connect_params()) as conn:
        conn.execute("SELECT pg_notify(%s, '')", [credential_cache.CHANNEL])
    deadline = time.monotonic() + 5
    while len(credential_cache.cache) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(credential_cache.cache) == 0


def test_a_lookup_that_began_before_a_change_is_not_kept(alice) -> None:
    generation = credential_cache.cache.generation
    credential_cache.cache.clear()  # a change lands while a lookup is in flight
    credential_cache.cache.put("digest", generation, object(), object())
    assert credential_cache.cache.get("digest") is None


def test_a_changed_quota_applies_on_the_next_request(alice) -> None:
    from controlplane.quotas.limits import limits_for
    from controlplane.quotas.services import quota_set

    before = limits_for(alice.tenant)
    assert limits_for(alice.tenant) is before  # served from the cache
    quota_set(tenant=alice.tenant, requests_per_minute=7)
    assert limits_for(alice.tenant).requests_per_minute == 7
