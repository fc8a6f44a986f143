"""Budgets through the API: made, read, changed and deleted under their IAM actions; bad bodies
are 400s naming the field; a scope naming another account's key or session is a 404; the
operator's monthly token budget is listed but not changed here; a hard budget refuses the
token-consuming requests it covers (a key's, a session's, a tag's, the account's) with a 402
naming it, and lets the others through; spend in dollars is priced from the price book."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone
from rest_framework.test import APIClient

from controlplane.budgets import admission
from controlplane.metering.models import UsageRecord
from controlplane.metering.services import price_set
from controlplane.tenants.models import Membership
from controlplane.training_sessions.models import Session
from tests.support.callers import Person, member
from tests.support.tiny_worker import TINY
from tests.support.wire import create_model, datum, fwdbwd, result

pytestmark = pytest.mark.django_db

BATCH = [datum(list(range(1, 11)))]  # 10 train tokens
MONTHLY = {"scope": "account", "unit": "tokens", "period": "month"}


def make(person, name: str, **fields):
    return person.post("billing/budgets", {"name": name, **MONTHLY, "amount": 100, **fields})


def session_of(person, *, tags=("t",), user_metadata=None) -> str:
    body = {"tags": list(tags), "sdk_version": "test", "role_arn": person.role_arn}
    if user_metadata is not None:
        body["user_metadata"] = user_metadata
    r = person.post("create_session", body)
    assert r.status_code == 200, r.content
    return r.json()["session_id"]


def second_key(person: Person) -> tuple[str, Person]:
    """Another API key of ``person``: its prefix, and ``person`` calling with it."""
    made = person.post("iam/api-keys", {"name": "second"}).json()
    client = APIClient()
    client.credentials(HTTP_X_API_KEY=made["api_key"])
    return made["prefix"], Person(
        person.name, client, person.tenant, person.role_arn, made["api_key"]
    )


def _session(person: Person) -> Session:
    return Session.objects.create(tenant=person.tenant)


def test_a_budget_is_made_read_changed_and_deleted(alice) -> None:
    r = make(alice, "team", unit="usd", amount="12.5", description="the team's month")
    assert r.status_code == 201, r.content
    made = r.json()
    assert made["arn"] == f"arn:loopwright:billing::{alice.tenant.account_id}:budget/team"
    assert (made["amount"], made["thresholds"], made["hard"]) == ("12.500000", [50, 80, 100], True)
    assert made["webhook_secret"] is None and made["webhook"] is None
    current = made["current_period"]
    assert current["spent"] == "0.000000" and current["exhausted"] is False
    assert current["start"].startswith(timezone.now().strftime("%Y-%m-01"))
    assert [b["name"] for b in alice.get("billing/budgets").json()["budgets"]] == ["team"]

    r = alice.client.patch(
        "/api/v1/billing/budgets/team",
        {"amount": 20, "thresholds": [90, 25], "hard": False},
        format="json",
    )
    assert r.status_code == 200, r.content
    changed = r.json()
    assert (changed["amount"], changed["thresholds"], changed["hard"]) == (
        "20.000000",
        [25, 90],
        False,
    )
    assert "webhook_secret" not in changed
    assert alice.client.delete("/api/v1/billing/budgets/team").status_code == 204
    assert alice.get("billing/budgets/team").status_code == 404


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"name": "no spaces"}, "name"),
        ({"scope": "organisation"}, "scope"),
        ({"unit": "eur"}, "unit"),
        ({"period": "year"}, "period"),
        ({"amount": -1}, "amount"),
        ({"amount": "1e20"}, "amount"),
        ({"amount": "2.5"}, "amount"),  # tokens are whole
        ({"unit": "usd", "amount": "0.0000001"}, "amount"),
        ({"amount": "NaN"}, "amount"),
        ({"thresholds": [0]}, "thresholds"),
        ({"thresholds": list(range(1, 12))}, "thresholds"),
        ({"webhook_url": "ftp://example.com/hook"}, "webhook_url"),
        ({"webhook_url": "https://user:pw@example.com/hook"}, "webhook_url"),
        ({"webhook_url": "http://127.0.0.1:9/hook"}, "webhook_url"),
        ({"webhook_url": "http://169.254.169.254/latest"}, "webhook_url"),
        ({"scope": "tag"}, "scope_value"),
        ({"scope": "tag", "scope_value": "a\nb"}, "scope_value"),
        ({"scope": "account", "scope_value": "x"}, "scope_value"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_bad_bodies_are_400s_naming_the_field(alice, fields, field) -> None:
    r = alice.post("billing/budgets", {"name": "b", **MONTHLY, "amount": 5, **fields})
    assert r.status_code == 400, r.content
    assert r.json()["field"].split("[")[0] == field, r.json()
    assert alice.get("billing/budgets").json()["budgets"] == []


def test_a_name_is_taken_once_and_the_operators_name_is_reserved(alice) -> None:
    assert make(alice, "once").status_code == 201
    again = make(alice, "once")
    assert again.status_code == 409 and again.json()["field"] == "name"
    assert make(alice, "monthly-token-budget").status_code == 409


def test_a_scope_naming_another_accounts_key_or_session_is_a_404(alice, charlie) -> None:
    sid = session_of(alice)
    access = alice.post("iam/access-keys", {"name": "k"}).json()["access_key_id"]
    prefix = alice.key.split(".")[0]
    for scope, value in (("api_key", prefix), ("api_key", access), ("session", sid)):
        r = make(charlie, "steal", scope=scope, scope_value=value)
        assert r.status_code == 404, (scope, r.content)
        never = make(charlie, "steal", scope=scope, scope_value=value[:-3] + "zzz")
        assert never.status_code == 404
        assert never.json()["detail"] == r.json()["detail"].replace(value, value[:-3] + "zzz")
    for scope, value in (("api_key", prefix), ("api_key", access), ("session", sid)):
        assert (
            make(alice, f"mine-{scope}-{len(value)}", scope=scope, scope_value=value).status_code
            == 201
        )


def test_members_may_not_manage_budgets_and_billing_viewers_only_read(alice, bob) -> None:
    assert make(alice, "cap").status_code == 201
    assert bob.get("billing/budgets").status_code == 403
    assert make(bob, "mine").status_code == 403
    viewer = member("vera", alice, Membership.Role.BILLING_VIEWER)
    assert [b["name"] for b in viewer.get("billing/budgets").json()["budgets"]] == ["cap"]
    assert viewer.get("billing/budgets/cap").status_code == 200
    assert make(viewer, "mine").status_code == 403
    r = viewer.client.patch("/api/v1/billing/budgets/cap", {"amount": 1}, format="json")
    assert r.status_code == 403


def test_the_operators_monthly_token_budget_is_listed_but_not_changed_here(alice) -> None:
    call_command(
        "set_quota",
        "--account",
        alice.tenant.account_id,
        "--monthly-token-budget",
        "500",
        stdout=StringIO(),
    )
    admission.admit(  # the first request the account makes puts the quota's budget in place
        tenant=alice.tenant,
        session=_session(alice),
        api_key="",
        kind="forward",
        payload={"forward_input": {"data": BATCH}},
        base_model=TINY,
    )
    shown = alice.get("billing/budgets/monthly-token-budget").json()
    assert (shown["managed_by"], shown["amount"], shown["unit"], shown["period"]) == (
        "operator",
        "500",
        "tokens",
        "month",
    )
    r = alice.client.patch(
        "/api/v1/billing/budgets/monthly-token-budget", {"amount": 9000}, format="json"
    )
    assert r.status_code == 400 and "set_quota" in r.json()["detail"]
    assert alice.client.delete("/api/v1/billing/budgets/monthly-token-budget").status_code == 400


def test_a_key_budget_refuses_that_keys_requests_and_names_itself(alice, runtime) -> None:
    prefix, other = second_key(alice)
    assert (
        make(alice, "second-key", scope="api_key", scope_value=prefix, amount=10).status_code == 201
    )
    sid = session_of(alice)
    model = create_model(alice, runtime, sid)
    fut = other.post("forward_backward", fwdbwd(model, 1, BATCH))
    assert fut.status_code == 200, fut.content
    result(other, runtime, fut.json())
    assert UsageRecord.objects.get(operation_id=fut.json()["request_id"]).api_key == prefix

    refused = other.post("forward_backward", fwdbwd(model, 2, BATCH))
    assert refused.status_code == 402, refused.content
    body = refused.json()
    assert body["code"] == "budget_exhausted"
    assert body["detail"].startswith(
        f"budget 'second-key' (10 tokens per month on API key {prefix}) has used 10 tokens in "
    )
    assert "PATCH /api/v1/billing/budgets/second-key" in body["detail"]
    ok = alice.post("forward_backward", fwdbwd(model, 3, BATCH))  # another key: not counted
    assert ok.status_code == 200, ok.content
    own = result(alice, runtime, ok.json())
    assert "loss_fn_outputs" in own
    assert (
        UsageRecord.objects.get(operation_id=ok.json()["request_id"]).api_key
        == (alice.key.split(".")[0])
    )


def test_session_and_tag_budgets_cover_their_sessions_only(alice, runtime) -> None:
    tagged = session_of(alice, tags=["project:search"], user_metadata={"team": "ranking"})
    plain = session_of(alice, tags=[])
    capped = session_of(alice, tags=[])
    assert (
        make(alice, "search", scope="tag", scope_value="project:search", amount=10).status_code
        == 201
    )
    assert (
        make(alice, "ranking", scope="tag", scope_value="team=ranking", amount=25).status_code
        == 201
    )
    assert make(alice, "one", scope="session", scope_value=capped, amount=0).status_code == 201

    models = {sid: create_model(alice, runtime, sid) for sid in (tagged, plain, capped)}
    first = alice.post("forward_backward", fwdbwd(models[tagged], 1, BATCH))
    result(alice, runtime, first.json())
    refused = alice.post("forward_backward", fwdbwd(models[tagged], 2, BATCH))
    assert refused.status_code == 402 and "budget 'search'" in refused.json()["detail"]
    assert "sessions tagged 'project:search'" in refused.json()["detail"]
    zero = alice.post("forward_backward", fwdbwd(models[capped], 1, BATCH))
    assert zero.status_code == 402 and "budget 'one'" in zero.json()["detail"]
    for seq in (1, 2, 3):
        assert alice.post("forward_backward", fwdbwd(models[plain], seq, BATCH)).status_code == 200
    runtime.drain()
    shown = alice.get("billing/budgets/ranking").json()["current_period"]
    assert (shown["spent"], shown["percent"], shown["exhausted"]) == ("10", 40.0, False)


def test_a_dollar_budget_counts_cost_from_the_price_book(alice, runtime) -> None:
    price_set(
        base_model=TINY,
        meter="train_tokens",
        per_million=Decimal("150000"),  # 10 tokens: $1.50
        effective_from=timezone.now() - timedelta(days=1),
    )
    assert make(alice, "dollars", unit="usd", amount="4", period="day").status_code == 201
    sid = session_of(alice)
    model = create_model(alice, runtime, sid)
    for seq in (1, 2, 3):  # $0, $1.50, $3.00 spent before each: all under $4
        fut = alice.post("forward_backward", fwdbwd(model, seq, BATCH))
        assert fut.status_code == 200, fut.content
        result(alice, runtime, fut.json())
    refused = alice.post("forward_backward", fwdbwd(model, 4, BATCH))
    assert refused.status_code == 402, refused.content
    assert "has used $4.500000 on " in refused.json()["detail"]  # one operation over: no more
    current = alice.get("billing/budgets/dollars").json()["current_period"]
    assert (current["spent"], current["remaining"], current["exhausted"]) == (
        "4.500000",
        "0.000000",
        True,
    )


def test_a_day_budget_starts_again_the_next_day(alice, runtime, monkeypatch) -> None:
    assert make(alice, "daily", period="day", amount=10).status_code == 201
    sid = session_of(alice)
    model = create_model(alice, runtime, sid)
    result(alice, runtime, alice.post("forward_backward", fwdbwd(model, 1, BATCH)).json())
    refused = alice.post("forward_backward", fwdbwd(model, 2, BATCH))
    assert refused.status_code == 402
    tomorrow = datetime.now(UTC).date() + timedelta(days=1)
    assert f"resets at {tomorrow:%Y-%m-%d}T00:00:00Z" in refused.json()["detail"]
    monkeypatch.setattr(
        admission, "_clock", lambda: datetime.combine(tomorrow, datetime.min.time(), tzinfo=UTC)
    )
    assert alice.post("forward_backward", fwdbwd(model, 3, BATCH)).status_code == 200


def test_a_total_budget_never_resets_and_a_soft_one_never_refuses(alice, runtime) -> None:
    sid = session_of(alice)
    assert (
        make(alice, "ever", period="total", scope="session", scope_value=sid, amount=5).status_code
        == 201
    )
    assert make(alice, "soft", amount=1, hard=False).status_code == 201
    model = create_model(alice, runtime, sid)
    result(alice, runtime, alice.post("forward_backward", fwdbwd(model, 1, BATCH)).json())
    refused = alice.post("forward_backward", fwdbwd(model, 2, BATCH))
    assert refused.status_code == 402
    detail = refused.json()["detail"]
    assert "budget 'ever'" in detail and "in total" in detail
    assert detail.endswith("until the budget is raised (PATCH /api/v1/billing/budgets/ever)")
