"""Per-tenant quotas: concurrent sessions (a 429 naming the limit, freed by stop and idle expiry,
atomic under parallel creation) and requests per minute (429 with Retry-After), per tenant."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, connections
from django.utils import timezone

from controlplane.audit.models import AuditEvent
from controlplane.errors import QuotaExceeded
from controlplane.operations.session_end import sessions_expire_idle
from controlplane.quotas import ratelimit
from controlplane.quotas.models import RequestCount
from controlplane.training_sessions.models import Session
from controlplane.training_sessions.services.sessions import session_create
from tests.support.quotas import set_quota
from tests.support.wire import create_model, open_session

pytestmark = pytest.mark.django_db

WINDOW_START = 29_000_000 * 60  # a whole minute


def create(person):
    return person.post(
        "create_session", {"tags": [], "sdk_version": "test", "role_arn": person.role_arn}
    )


def assert_session_quota(response, *, limit: int, live: int) -> None:
    assert response.status_code == 429, response.content
    body = response.json()
    assert (body["code"], body["field"]) == ("quota_exceeded", None)
    assert f"{live} live sessions" in body["detail"]
    assert f"limit of {limit} concurrent sessions" in body["detail"]
    assert "stop()" in body["detail"] and "900 seconds without a heartbeat" in body["detail"]


def test_the_session_over_the_limit_is_a_429_naming_it(alice, bob, settings) -> None:
    settings.MAX_CONCURRENT_SESSIONS = 2
    open_session(alice)
    open_session(bob)  # same tenant
    assert_session_quota(create(alice), limit=2, live=2)
    assert Session.objects.filter(tenant=alice.tenant).count() == 2


def test_stop_frees_a_slot_even_while_its_models_unload(alice, runtime, settings) -> None:
    settings.MAX_CONCURRENT_SESSIONS = 1
    first = open_session(alice)
    create_model(alice, runtime, first)
    assert_session_quota(create(alice), limit=1, live=1)
    stopped = alice.post(f"sessions/{first}/stop").json()
    assert stopped["state"] == "stopping"  # its model unloads after the queued operations
    assert create(alice).status_code == 200


def test_idle_expiry_frees_a_slot(alice, settings) -> None:
    settings.MAX_CONCURRENT_SESSIONS = 1
    sid = open_session(alice)
    assert create(alice).status_code == 429
    Session.objects.filter(pk=sid).update(
        last_heartbeat_at=timezone.now() - timedelta(seconds=settings.SESSION_IDLE_TIMEOUT_SECONDS)
    )
    assert sessions_expire_idle() == [sid]
    assert create(alice).status_code == 200


def test_another_tenants_sessions_do_not_count(alice, charlie, settings) -> None:
    settings.MAX_CONCURRENT_SESSIONS = 1
    open_session(charlie)
    open_session(alice)
    assert_session_quota(create(alice), limit=1, live=1)
    assert_session_quota(create(charlie), limit=1, live=1)


def test_set_quota_overrides_one_tenant_and_goes_back_to_the_default(alice, charlie) -> None:
    out = set_quota(alice, "--concurrent-sessions", "1", "--requests-per-minute", "100")
    assert out.splitlines() == [
        "concurrent_sessions\t1",
        "requests_per_minute\t100",
        "monthly_token_budget\tunlimited",
        "max_replicas\t8",
        f"recorded_bytes\t{1024**3}",
    ]
    open_session(alice)
    assert_session_quota(create(alice), limit=1, live=1)
    open_session(charlie)
    open_session(charlie)  # the default, 10
    event = AuditEvent.objects.filter(action="quotas:SetQuota").get()
    assert event.tenant_id == alice.tenant.pk and "concurrent_sessions=1" in event.reason
    assert set_quota(alice, "--concurrent-sessions", "default").splitlines() == [
        "concurrent_sessions\t10",
        "requests_per_minute\t100",  # untouched
        "monthly_token_budget\tunlimited",
        "max_replicas\t8",
        f"recorded_bytes\t{1024**3}",
    ]
    assert create(alice).status_code == 200
    assert set_quota(alice).splitlines()[0] == "concurrent_sessions\t10"  # shows, changes nothing


def test_set_quota_refuses_bad_values(alice) -> None:
    for args, message in [
        (("--requests-per-minute", "0"), "requests per minute must be 1 or more"),
        (("--concurrent-sessions", "-1"), "concurrent sessions must be 0 or more"),
        (("--concurrent-sessions", "many"), "'many' is not a number or 'default'"),
        (("--max-replicas", "0"), "max replicas must be from 1 to 1024"),
        (("--max-replicas", "1025"), "max replicas must be from 1 to 1024"),
        (("--recorded-bytes", "-1"), "recorded bytes must be 0 or more"),
    ]:
        with pytest.raises(CommandError, match=message):
            set_quota(alice, *args)
    with pytest.raises(CommandError, match="no account 000000000000"):
        call_command("set_quota", "--account", "000000000000", stdout=StringIO())


def test_set_quota_overrides_max_replicas_for_one_tenant(alice, charlie, settings) -> None:
    settings.MAX_REPLICAS = 4
    assert set_quota(alice, "--max-replicas", "2").splitlines()[3] == "max_replicas\t2"
    assert set_quota(charlie).splitlines()[3] == "max_replicas\t4"  # the setting
    event = AuditEvent.objects.filter(action="quotas:SetQuota").get()
    assert event.tenant_id == alice.tenant.pk and "max_replicas=2" in event.reason
    assert set_quota(alice, "--max-replicas", "default").splitlines()[3] == "max_replicas\t4"


@pytest.mark.django_db(transaction=True)
def test_parallel_creations_never_overshoot(alice, settings) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("parallel creation needs PostgreSQL's row locks")
    settings.MAX_CONCURRENT_SESSIONS = 3

    def attempt(_: int) -> str:
        try:
            return session_create(tenant=alice.tenant, platform={"role_arn": alice.role_arn}).id
        except QuotaExceeded:
            return "refused"
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=8) as pool:
        outcomes = list(pool.map(attempt, range(8)))
    assert outcomes.count("refused") == 5
    assert Session.objects.filter(tenant=alice.tenant, state="pending").count() == 3


@pytest.fixture
def clock(monkeypatch):
    now = [WINDOW_START + 30.0]
    monkeypatch.setattr(ratelimit, "_clock", lambda: now[0])
    return now


def test_requests_over_the_rate_are_a_429_until_the_window_resets(
    alice, bob, charlie, clock
) -> None:
    set_quota(alice, "--requests-per-minute", "3")
    assert alice.get("sessions").status_code == 200
    assert bob.get("sessions").status_code == 200  # bob's calls count for the same tenant
    assert alice.get("sessions").status_code == 200
    refused = alice.get("sessions")
    assert refused.status_code == 429
    assert refused["Retry-After"] == "30"
    assert refused.json() == {
        "detail": f"account {alice.tenant.account_id} is over its limit of 3 requests per "
        "minute; the window resets in 30 seconds",
        "code": "throttled",
        "field": None,
    }
    clock[0] += 29.5
    assert bob.get("sessions")["Retry-After"] == "1"
    for _ in range(5):
        assert charlie.get("sessions").status_code == 200  # the default, 6000
    clock[0] += 1  # the next minute
    assert alice.get("sessions").status_code == 200


def test_long_polls_count_too(alice, clock) -> None:
    set_quota(alice, "--requests-per-minute", "1")
    alice.get("sessions")
    refused = alice.post("retrieve_future", {"request_id": "op-nothing"})
    assert refused.status_code == 429 and refused.json()["code"] == "throttled"


def test_finished_windows_are_pruned(alice, charlie, clock) -> None:
    alice.get("sessions")
    clock[0] += 60
    charlie.get("sessions")
    assert RequestCount.objects.count() == 2
    assert ratelimit.request_counts_prune(now=clock[0] + 60) == 1
    assert list(RequestCount.objects.values_list("tenant_id", flat=True)) == [charlie.tenant.pk]


def test_unreachable_redis_lets_requests_through(alice, settings, clock) -> None:
    settings.RATE_LIMIT_REDIS_URL = "redis://127.0.0.1:1/0"
    set_quota(alice, "--requests-per-minute", "1")
    assert [alice.get("sessions").status_code for _ in range(3)] == [200, 200, 200]
    assert not RequestCount.objects.exists()


def test_the_redis_window_counts_per_tenant(alice, charlie, settings, clock) -> None:
    # the Redis the end-to-end tests use too (.ci/run starts it)
    settings.RATE_LIMIT_REDIS_URL = os.environ.get(
        "LOOPWRIGHT_TEST_REDIS_URL", "redis://127.0.0.1:6379/15"
    )
    set_quota(alice, "--requests-per-minute", "2")
    assert [alice.get("sessions").status_code for _ in range(3)] == [200, 200, 429]
    assert charlie.get("sessions").status_code == 200
    assert not RequestCount.objects.exists()
    clock[0] += 30
    assert alice.get("sessions").status_code == 200


def test_set_quota_overrides_recorded_bytes_for_one_tenant(alice, charlie, settings) -> None:
    settings.MAX_RECORDED_BYTES = 5000
    assert set_quota(alice, "--recorded-bytes", "100").splitlines()[4] == "recorded_bytes\t100"
    assert set_quota(charlie).splitlines()[4] == "recorded_bytes\t5000"  # the setting
    event = AuditEvent.objects.filter(action="quotas:SetQuota").get()
    assert event.tenant_id == alice.tenant.pk and "recorded_bytes=100" in event.reason
    assert set_quota(alice, "--recorded-bytes", "default").splitlines()[4] == "recorded_bytes\t5000"
