"""Per-token metering: a scripted session's usage equals the tokens counted from its requests and
results, exactly once; reports group, filter and price it; tenants see only their own."""

from __future__ import annotations

import csv
import io
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

import pytest
from django.core.management import call_command
from django.utils import timezone

from controlplane.metering.models import PricePoint, UsageRecord
from controlplane.metering.rollup import usage_rows_write
from controlplane.metering.services import price_set, usage_record_for
from controlplane.operations import complete
from controlplane.tenants.models import Membership
from controlplane.training_sessions.models import Operation
from tests.support.callers import Person, member
from tests.support.tiny_worker import TINY
from tests.support.wire import create_model, datum, fwdbwd, open_session, result

pytestmark = pytest.mark.django_db

TRAIN_BATCHES = [[[1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11, 12]], [[20, 21, 22]]]
FORWARD_BATCH = [[30, 31, 32, 33]]
PROMPT = [40, 41, 42, 43, 44, 45]
NUM_SAMPLES = 3


def _usage(**filters) -> dict[str, int]:
    out: dict[str, int] = {}
    for row in UsageRecord.objects.filter(**filters):
        out[row.meter] = out.get(row.meter, 0) + row.quantity
    return out


@pytest.fixture
def scripted(alice: Person, runtime) -> dict:
    """create_model, 2 forward_backward, forward, optim_step, a sampler and one asample × 3."""
    session = open_session(alice)
    model = create_model(alice, runtime, session)
    seq = 1
    for batch in TRAIN_BATCHES:
        fut = alice.post("forward_backward", fwdbwd(model, seq, [datum(t) for t in batch])).json()
        assert "loss_fn_outputs" in result(alice, runtime, fut)
        seq += 1
    forward = {"data": [datum(t) for t in FORWARD_BATCH], "loss_fn": "cross_entropy"}
    fut = alice.post("forward", {"model_id": model, "seq_id": seq, "forward_input": forward})
    assert "loss_fn_outputs" in result(alice, runtime, fut.json())
    fut = alice.post(
        "optim_step", {"model_id": model, "seq_id": seq + 1, "adam_params": {"learning_rate": 0.01}}
    )
    result(alice, runtime, fut.json())
    fut = alice.post(
        "save_weights_for_sampler", {"model_id": model, "seq_id": seq + 2, "path": "s"}
    )
    path = result(alice, runtime, fut.json())["path"]
    sampler = alice.post(
        "create_sampling_session",
        {"session_id": session, "sampling_session_seq_id": 0, "model_path": path},
    ).json()["sampling_session_id"]
    fut = alice.post(
        "asample",
        {
            "sampling_session_id": sampler,
            "num_samples": NUM_SAMPLES,
            "prompt": {"chunks": [{"type": "encoded_text", "tokens": PROMPT}]},
            "sampling_params": {"max_tokens": 4, "temperature": 1.0},
        },
    ).json()
    sample = result(alice, runtime, fut)
    assert len(sample["sequences"]) == NUM_SAMPLES
    expected = {
        "train_tokens": sum(len(t) for batch in TRAIN_BATCHES for t in batch),
        "forward_tokens": sum(len(t) for t in FORWARD_BATCH),
        "prefill_tokens": len(PROMPT),  # once per request, however many samples
        "sampled_tokens": sum(len(s["tokens"]) for s in sample["sequences"]),
    }
    return {"session": session, "model": model, "sampler": sampler, "expected": expected}


def test_usage_equals_tokens_counted_from_requests_and_results(alice, scripted) -> None:
    expected = scripted["expected"]
    assert expected["sampled_tokens"] > 0
    assert _usage(session_id=scripted["session"]) == expected
    kinds = set(
        Operation.objects.filter(usage_records__isnull=False).values_list("kind", flat=True)
    )
    assert kinds == {"forward_backward", "forward", "sample"}
    row = UsageRecord.objects.get(meter="sampled_tokens")
    assert (row.sampler_id, row.model_id, row.base_model) == (scripted["sampler"], None, TINY)
    assert row.occurred_at == Operation.objects.get(pk=row.operation_id).finished_at

    r = alice.get(f"sessions/{scripted['session']}/usage")
    assert r.status_code == 200, r.content
    body = r.json()
    assert {ln["meter"]: ln["quantity"] for ln in body["lines"]} == expected
    assert {ln["base_model"] for ln in body["lines"]} == {TINY}
    prices = {"train_tokens": "0.30", "forward_tokens": "0.10"}
    prices |= {"prefill_tokens": "0.10", "sampled_tokens": "0.25"}
    cost = sum(Decimal(prices[m]) * q / 1_000_000 for m, q in expected.items())
    assert Decimal(body["total_cost"]) == cost.quantize(Decimal("0.000001"), ROUND_HALF_UP)
    assert body["total_quantity"] == sum(expected.values())


def test_completing_again_adds_nothing(scripted, runtime) -> None:
    before = _usage()
    for op in Operation.objects.filter(kind__in=["forward_backward", "forward", "sample"]):
        complete.complete(
            op, op.result, runtime.fence
        )  # a redelivered completion: no longer running
        Operation.objects.filter(pk=op.pk).update(status=Operation.Status.RUNNING)
        complete.complete(
            op, op.result, runtime.fence
        )  # completed again after a worker lost track of it
        usage_record_for(op)
    assert _usage() == before
    assert UsageRecord.objects.count() == 5  # 2 forward_backward, forward, sample × 2 meters


def test_failed_operation_adds_nothing(alice, runtime) -> None:
    session = open_session(alice)
    model = create_model(alice, runtime, session)
    bad = datum([1, 2, 3], targets=[1, 2])  # targets do not match the input
    fut = alice.post("forward_backward", fwdbwd(model, 1, [bad])).json()
    assert "error" in result(alice, runtime, fut)
    op = Operation.objects.get(pk=fut["request_id"])
    assert op.status == Operation.Status.FAILED
    assert not UsageRecord.objects.exists()


# Reports on rows written at known times ---------------------------------------------------------

DAY1 = datetime(2026, 11, 10, 12, tzinfo=UTC)
DAY2 = datetime(2026, 12, 5, 12, tzinfo=UTC)


def _row(person: Person, session: str, meter: str, qty: int, at: datetime, base: str = TINY):
    row = UsageRecord(
        tenant=person.tenant,
        session_id=session,
        base_model=base,
        meter=meter,
        quantity=qty,
        occurred_at=at,
    )
    return usage_rows_write([row])


@pytest.fixture
def history(alice: Person, charlie: Person) -> dict:
    """alice: 2 sessions over two months, a price rise on 2026-12-01; charlie: one row."""
    _row(alice, "sess-a", "train_tokens", 1_000_000, DAY1)
    _row(alice, "sess-a", "sampled_tokens", 2_000_000, DAY1)
    _row(alice, "sess-b", "train_tokens", 3_000_000, DAY2)
    _row(alice, "sess-b", "train_tokens", 500_000, DAY2, base="other/model")
    _row(charlie, "sess-charlie", "train_tokens", 7_000_000, DAY2)
    call_command(
        "set_price", "--meter", "train_tokens", "--per-million", "0.40", "--from", "2026-12-01"
    )
    price_set(
        base_model="other/model",
        meter="train_tokens",
        per_million=Decimal("1.000001"),
        effective_from=datetime(2026, 1, 1, tzinfo=UTC),
    )
    return {}


def _report(person: Person, **params) -> dict:
    r = person.get("billing/usage", {"start": "2026-11-01", "end": "2026-12-31", **params})
    assert r.status_code == 200, r.content
    return r.json()


def test_report_prices_each_period_at_the_price_in_force(alice, history) -> None:
    body = _report(alice, group_by="day,meter")
    lines = {(ln["day"], ln["meter"]): (ln["quantity"], ln["cost"]) for ln in body["lines"]}
    assert lines == {
        ("2026-11-10", "train_tokens"): (1_000_000, "0.300000"),
        ("2026-11-10", "sampled_tokens"): (2_000_000, "0.500000"),
        # 3M at the new * price, 0.5M at other/model's own price (which beats *)
        ("2026-12-05", "train_tokens"): (3_500_000, "1.700001"),
    }
    assert body["total"] == {"quantity": 6_500_000, "cost": "2.500001"}
    assert body["currency"] == "usd"


def test_report_groups_and_filters(alice, history) -> None:
    by_session = _report(alice, group_by="session")["lines"]
    assert [(ln["session"], ln["quantity"]) for ln in by_session] == [
        ("sess-a", 3_000_000),
        ("sess-b", 3_500_000),
    ]
    by_model = _report(alice, group_by="base_model", meter="train_tokens")["lines"]
    assert [(ln["base_model"], ln["quantity"]) for ln in by_model] == [
        (TINY, 4_000_000),
        ("other/model", 500_000),
    ]
    nov = _report(alice, end="2026-11-30")
    assert nov["lines"] == [{"quantity": 3_000_000, "cost": "0.800000"}]
    assert nov["group_by"] == []


def test_csv_parses_back_to_the_same_numbers(alice, history) -> None:
    params = {"start": "2026-11-01", "end": "2026-12-31", "group_by": "day,base_model,meter"}
    r = alice.get("billing/usage", {**params, "format": "csv"})
    assert r.status_code == 200, r.content
    assert r["Content-Type"].startswith("text/csv")
    assert 'filename="usage-2026-11-01-2026-12-31.csv"' in r["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(r.content.decode())))
    expected = alice.get("billing/usage", params).json()["lines"]
    assert [
        {k: row[k] for k in ("day", "base_model", "meter")}
        | {"quantity": int(row["quantity"]), "cost": row["cost"]}
        for row in rows
    ] == expected
    assert {row["currency"] for row in rows} == {"usd"}


@pytest.mark.parametrize(
    ("params", "field", "says"),
    [
        ({"start": "2026-12-02", "end": "2026-12-01"}, "end", "before start"),
        ({"start": "2025-01-01", "end": "2026-12-31"}, "end", "366"),
        ({"start": "2026-13-01"}, "start", "ISO date"),
        ({"group_by": "day,tenant"}, "group_by", "tenant"),
        ({"meter": "gpu_seconds"}, "meter", "gpu_seconds"),
        ({"format": "xlsx"}, "format", "csv"),
    ],
)
def test_bad_parameters_are_400s_naming_the_field(alice, params, field, says) -> None:
    r = alice.get("billing/usage", params)
    assert r.status_code == 400, r.content
    body = r.json()
    assert body["field"] == field and says in body["detail"], body


def test_invoice_preview_is_the_current_month(alice, charlie) -> None:
    now = timezone.now()
    _row(alice, "sess-a", "train_tokens", 2_000_000, now)
    _row(alice, "sess-a", "prefill_tokens", 1_000_000, now)
    _row(alice, "sess-a", "train_tokens", 9_000_000, now - timedelta(days=40))
    body = alice.get("billing/invoice-preview").json()
    assert body["period_start"] == date.today().replace(day=1).isoformat()
    assert [(ln["meter"], ln["quantity"], ln["cost"]) for ln in body["lines"]] == [
        ("prefill_tokens", 1_000_000, "0.100000"),
        ("train_tokens", 2_000_000, "0.600000"),
    ]
    assert (body["subtotal"], body["amount_due"]) == ("0.700000", "0.70")
    assert charlie.get("billing/invoice-preview").json()["lines"] == []


def test_tenants_see_only_their_own_usage(alice, charlie, history) -> None:
    mine = _report(charlie, group_by="session")["lines"]
    assert [(ln["session"], ln["quantity"]) for ln in mine] == [("sess-charlie", 7_000_000)]
    assert "sess-charlie" not in str(_report(alice, group_by="session,base_model,meter"))
    r = charlie.get("billing/usage", {"start": "2026-11-01", "end": "2026-12-31", "format": "csv"})
    assert "7000000" in r.content.decode() and "6500000" not in r.content.decode()


def test_session_usage_of_another_tenant_is_404(alice, charlie, scripted) -> None:
    r = charlie.get(f"sessions/{scripted['session']}/usage")
    assert r.status_code == 404, r.content
    assert alice.get("sessions/sess-nope/usage").status_code == 404


def test_members_may_not_read_billing_but_billing_viewers_may(alice, bob, history) -> None:
    r = bob.get("billing/usage")
    assert r.status_code == 403, r.content
    assert "billing:GetUsageReport" in r.json()["detail"]
    assert bob.get("billing/invoice-preview").status_code == 403
    viewer = member("vera", alice, role=Membership.Role.BILLING_VIEWER)
    assert _report(viewer)["total"]["quantity"] == 6_500_000
    assert viewer.get("billing/invoice-preview").status_code == 200


def test_default_prices_are_seeded() -> None:
    seeded = PricePoint.objects.filter(base_model="*").values_list("meter", flat=True)
    assert set(seeded) == {
        "train_tokens",
        "forward_tokens",
        "prefill_tokens",
        "sampled_tokens",
        "storage_gb_months",
    }
