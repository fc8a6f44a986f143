"""The monthly token budget (the account's quota, held by the budgets' hard cap like any budget):
token-consuming requests are refused with a 402 naming the budget, the usage and the reset once
a tenant's tokens this month reach it; other operations, other tenants and the next month are
unaffected; the SDK raises PaymentRequiredError."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.core.management import CommandError
from django.utils import timezone

import loopwright
from controlplane.budgets import admission
from controlplane.budgets.periods import next_month
from controlplane.errors import BudgetExhausted
from controlplane.metering.models import UsageRecord
from controlplane.metering.rollup import usage_rows_write
from controlplane.training_sessions.models import Operation, Session
from loopwright._http import HTTPClient
from tests.support.quotas import set_quota
from tests.support.sdk_transport import DjangoTransport
from tests.support.tiny_worker import TINY
from tests.support.wire import create_model, datum, fwdbwd, open_session, result

pytestmark = pytest.mark.django_db

BATCH = [datum([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])]  # 10 train tokens


def _used(person, tokens: int, at: datetime) -> None:
    usage_rows_write(
        [
            UsageRecord(
                tenant=person.tenant,
                session_id="sess-x",
                base_model=TINY,
                meter="train_tokens",
                quantity=tokens,
                occurred_at=at,
            )
        ]
    )


def _next_month_start(now: datetime) -> datetime:
    month = next_month(now.date().replace(day=1))
    return datetime(month.year, month.month, 1, tzinfo=UTC)


def token_budget_check(person, now: datetime | None = None) -> None:
    """Admit a 10-token forward_backward of ``person``'s account now (or at ``now``)."""
    session = Session.objects.create(tenant=person.tenant)
    admission.admit(
        tenant=person.tenant,
        session=session,
        api_key="",
        kind="forward_backward",
        payload={"forward_backward_input": {"data": BATCH}},
        base_model=TINY,
        now=now,
    )


def test_requests_run_below_the_budget_and_are_402_once_it_is_reached(
    alice, charlie, runtime, monkeypatch
) -> None:
    assert set_quota(alice, "--monthly-token-budget", "20").splitlines()[2] == (
        "monthly_token_budget\t20"
    )
    session = open_session(alice)
    model = create_model(alice, runtime, session)
    for seq in (1, 2):  # 0, then 10 tokens used: below 20
        fut = alice.post("forward_backward", fwdbwd(model, seq, BATCH))
        assert fut.status_code == 200, fut.content
        assert "loss_fn_outputs" in result(alice, runtime, fut.json())

    refused = alice.post("forward_backward", fwdbwd(model, 3, BATCH))  # 20 used: reached
    assert refused.status_code == 402, refused.content
    body = refused.json()
    assert (body["code"], body["field"]) == ("budget_exhausted", None)
    assert "used 20 tokens" in body["detail"]
    assert "monthly token budget of 20 tokens" in body["detail"]
    resets = _next_month_start(timezone.now())
    assert f"resets at {resets:%Y-%m-%dT%H:%M:%SZ}" in body["detail"]
    # the refused request still takes its seq_id, so later ones do not wait for it
    assert Operation.objects.get(model_id=model, seq_id=3).status == Operation.Status.FAILED
    forward = {
        "model_id": model,
        "seq_id": 4,
        "forward_input": {"data": BATCH, "loss_fn": "cross_entropy"},
    }
    assert alice.post("forward", forward).status_code == 402

    step = {"model_id": model, "seq_id": 5, "adam_params": {"learning_rate": 0.01}}
    fut = alice.post("optim_step", step)  # no tokens: still accepted
    assert fut.status_code == 200, fut.content
    assert "error" not in result(alice, runtime, fut.json())
    save = {"model_id": model, "seq_id": 6, "path": "kept"}
    assert alice.post("save_weights_for_sampler", save).status_code == 200

    sampler = alice.post(
        "create_sampling_session",
        {"session_id": session, "sampling_session_seq_id": 0, "base_model": TINY},
    ).json()["sampling_session_id"]
    sample = {
        "sampling_session_id": sampler,
        "num_samples": 1,
        "prompt": {"chunks": [{"type": "encoded_text", "tokens": [1, 2]}]},
        "sampling_params": {"max_tokens": 2},
    }
    r = alice.post("asample", sample)
    assert r.status_code == 402 and r.json()["code"] == "budget_exhausted", r.content

    # another tenant is unaffected
    other = create_model(charlie, runtime, open_session(charlie))
    assert charlie.post("forward_backward", fwdbwd(other, 1, BATCH)).status_code == 200

    # the next month starts from nothing
    monkeypatch.setattr(admission, "_clock", lambda: resets)
    assert alice.post("forward_backward", fwdbwd(model, 7, BATCH)).status_code == 200


def test_the_month_resets_at_midnight_utc_on_the_first(alice, monkeypatch) -> None:
    set_quota(alice, "--monthly-token-budget", "1000")
    _used(alice, 600, datetime(2026, 11, 30, 23, 0, tzinfo=UTC))  # last month: not counted
    _used(alice, 1000, datetime(2026, 12, 31, 23, 59, tzinfo=UTC))
    at = datetime(2026, 12, 31, 23, 59, 30, tzinfo=UTC)
    monkeypatch.setattr(admission, "_clock", lambda: at)
    with pytest.raises(BudgetExhausted) as info:
        token_budget_check(alice)
    assert info.value.detail == (
        f"account {alice.tenant.account_id} has used 1,000 tokens in 2026-12, its monthly token "
        "budget of 1,000 tokens; forward, forward_backward and sample requests are refused until "
        "the budget resets at 2027-01-01T00:00:00Z (UTC) or is raised"
    )
    token_budget_check(alice, now=datetime(2027, 1, 1, tzinfo=UTC))
    set_quota(alice, "--monthly-token-budget", "1001")  # raised: passes again
    token_budget_check(alice)


def test_the_default_comes_from_the_settings_and_an_override_beats_it(
    alice, charlie, settings, monkeypatch
) -> None:
    now = datetime(2026, 12, 10, tzinfo=UTC)
    monkeypatch.setattr(admission, "_clock", lambda: now)
    _used(alice, 50, now)
    _used(charlie, 50, now)
    assert set_quota(alice).splitlines()[2] == "monthly_token_budget\tunlimited"
    token_budget_check(alice)  # none set: unlimited
    settings.MONTHLY_TOKEN_BUDGET = 50
    for person in (alice, charlie):
        with pytest.raises(BudgetExhausted, match="budget of 50 tokens"):
            token_budget_check(person)
    assert set_quota(alice, "--monthly-token-budget", "51").splitlines()[2].endswith("\t51")
    token_budget_check(alice)
    set_quota(alice, "--monthly-token-budget", "0")  # 0 stops every token-consuming request
    with pytest.raises(BudgetExhausted, match="budget of 0 tokens"):
        token_budget_check(alice)
    assert set_quota(alice, "--monthly-token-budget", "default").splitlines()[2].endswith("\t50")


def test_a_negative_budget_is_refused(alice) -> None:
    with pytest.raises(CommandError, match="monthly token budget must be 0 or more"):
        set_quota(alice, "--monthly-token-budget", "-1")


def test_the_sdk_raises_payment_required(alice, runtime) -> None:
    set_quota(alice, "--monthly-token-budget", "0")
    model = create_model(alice, runtime, open_session(alice))
    http = HTTPClient("http://testserver", alice.key, transport=DjangoTransport())
    try:
        with pytest.raises(loopwright.PaymentRequiredError) as info:
            http.request("POST", "forward_backward", body=fwdbwd(model, 1, BATCH))
    finally:
        http.close()
    assert info.value.status_code == 402 and info.value.code == "budget_exhausted"
    assert "monthly token budget of 0 tokens" in info.value.detail
