"""Cost per key, per run and per hour: operations made with two keys in sessions of two runs
(tags) are reported, by the usage API, its CSV and Tinker's usage events, with exactly the
tokens the test sent and was sent back and the cost of those tokens at prices the test set,
each operation's usage naming the key that made it."""

from __future__ import annotations

import csv
import io
import random
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from controlplane.metering.models import UsageRecord
from controlplane.metering.services import price_set
from tests.support.callers import Person
from tests.support.tiny_worker import TINY
from tests.support.wire import create_model, datum, fwdbwd, result

pytestmark = pytest.mark.django_db

PRICES = {  # per million tokens, set by the test
    "train_tokens": Decimal("3.5"),
    "forward_tokens": Decimal("1.25"),
    "prefill_tokens": Decimal("0.75"),
    "sampled_tokens": Decimal("9"),
}


def six(amount: Decimal) -> Decimal:
    """Dollars as the reports write them: 6 decimals, halves rounded up."""
    return amount.quantize(Decimal("0.000001"), rounding=ROUND_HALF_UP)


def _other_key(person: Person) -> tuple[str, Person]:
    made = person.post("iam/api-keys", {"name": "ci"}).json()
    client = APIClient()
    client.credentials(HTTP_X_API_KEY=made["api_key"])
    return made["prefix"], Person(
        person.name, client, person.tenant, person.role_arn, made["api_key"]
    )


def _session(person: Person, tag: str) -> str:
    body = {"tags": [tag], "sdk_version": "t", "role_arn": person.role_arn}
    return person.post("create_session", body).json()["session_id"]


@pytest.fixture
def ledger(alice, runtime) -> dict:
    """Random training and sampling by two keys in two runs; what the test expects per
    (key, session, meter): the tokens it sent, and those the sampler sent back."""
    since = timezone.now() - timedelta(days=1)
    for meter, price in PRICES.items():
        price_set(base_model="*", meter=meter, per_million=price, effective_from=since)
    second, bot = _other_key(alice)
    first = alice.key.split(".")[0]
    rng = random.Random(5)
    expected: dict[tuple[str, str, str], int] = defaultdict(int)
    runs: dict[str, str] = {}
    for tag in ("run:a", "run:b"):
        sid = _session(alice, tag)
        runs[sid] = tag
        model = create_model(alice, runtime, sid)
        sampler = alice.post(
            "create_sampling_session",
            {"session_id": sid, "sampling_session_seq_id": 0, "base_model": TINY},
        ).json()["sampling_session_id"]
        seq = 0
        for step in range(8):
            caller, key = rng.choice(((alice, first), (bot, second)))
            if rng.random() < 0.6:
                seq += 1
                n = rng.randrange(3, 30)
                kind = rng.choice(("forward_backward", "forward"))
                data = {"data": [datum([rng.randrange(1, 200) for _ in range(n)])]}
                if kind == "forward":
                    body = {"model_id": model, "seq_id": seq, "forward_input": data}
                    body["forward_input"]["loss_fn"] = "cross_entropy"
                    meter = "forward_tokens"
                else:
                    body = fwdbwd(model, seq, data["data"])
                    meter = "train_tokens"
                out = result(caller, runtime, caller.post(kind, body).json())
                assert "loss_fn_outputs" in out, out
                expected[(key, sid, meter)] += n
            else:
                prompt = [rng.randrange(1, 200) for _ in range(rng.randrange(2, 9))]
                sample = {
                    "sampling_session_id": sampler,
                    "num_samples": 2,
                    "prompt": {"chunks": [{"type": "encoded_text", "tokens": prompt}]},
                    "sampling_params": {"max_tokens": rng.randrange(1, 7), "seed": step},
                }
                out = result(caller, runtime, caller.post("asample", sample).json())
                expected[(key, sid, "prefill_tokens")] += len(prompt)
                expected[(key, sid, "sampled_tokens")] += sum(
                    len(s["tokens"]) for s in out["sequences"]
                )
    return {"expected": dict(expected), "runs": runs, "keys": (first, second)}


def _cost(expected: dict, where) -> tuple[int, Decimal]:
    tokens = sum(q for k, q in expected.items() if where(k))
    cost = sum((PRICES[k[2]] * q / 1_000_000 for k, q in expected.items() if where(k)), Decimal(0))
    return tokens, cost


def test_each_operations_usage_names_its_key(alice, ledger) -> None:
    first, second = ledger["keys"]
    found = defaultdict(int)
    for row in UsageRecord.objects.filter(tenant=alice.tenant):
        found[(row.api_key, row.session_id, row.meter)] += row.quantity
    assert dict(found) == ledger["expected"]
    assert {k[0] for k in found} == {first, second}


def test_cost_per_key_and_per_run_is_the_sum_of_their_operations(alice, ledger) -> None:
    expected, runs = ledger["expected"], ledger["runs"]
    by_key = alice.get("billing/usage", {"group_by": "api_key"}).json()
    assert {line["api_key"] for line in by_key["lines"]} == set(ledger["keys"])
    for line in by_key["lines"]:
        tokens, cost = _cost(expected, lambda k, key=line["api_key"]: k[0] == key)
        assert (line["quantity"], Decimal(line["cost"])) == (tokens, six(cost))
    for sid, tag in runs.items():
        for params in ({"tag": tag}, {"session": sid}):
            report = alice.get("billing/usage", params).json()
            tokens, cost = _cost(expected, lambda k, s=sid: k[1] == s)
            assert report["total"] == {
                "quantity": tokens,
                "cost": str(six(cost)),
            }
        one_key = alice.get("billing/usage", {"tag": tag, "api_key": ledger["keys"][1]}).json()
        tokens, _ = _cost(expected, lambda k, s=sid: k[1] == s and k[0] == ledger["keys"][1])
        assert one_key["total"]["quantity"] == tokens
    assert alice.get("billing/usage", {"tag": "run:none"}).json()["lines"] == []


def test_the_csv_and_the_hours_say_the_same(alice, ledger) -> None:
    r = alice.get("billing/usage", {"group_by": "api_key,session,meter", "format": "csv"})
    rows = list(csv.DictReader(io.StringIO(r.content.decode())))
    assert {
        (row["api_key"], row["session"], row["meter"]): int(row["quantity"]) for row in rows
    } == (ledger["expected"])
    for row in rows:
        price = PRICES[row["meter"]]
        assert Decimal(row["cost"]) == six(price * int(row["quantity"]) / 1_000_000)
    hourly = alice.get("billing/usage", {"group_by": "hour,api_key"}).json()
    this_hour = datetime.now(UTC).strftime("%Y-%m-%dT%H:00:00Z")
    assert {line["hour"] for line in hourly["lines"]} <= {
        this_hour,
        (datetime.now(UTC) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:00:00Z"),
    }
    assert hourly["total"]["quantity"] == sum(ledger["expected"].values())
    long = alice.get(
        "billing/usage", {"group_by": "hour", "start": "2026-01-01", "end": "2026-03-01"}
    )
    assert long.status_code == 400 and long.json()["field"] == "end"


def test_tinkers_usage_events_carry_the_same_numbers(alice, charlie, ledger) -> None:
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    window = {
        "starting_on": (now - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "ending_before": (now + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    events = alice.get("billing/usage/events", window).json()
    got: dict[tuple, int] = defaultdict(int)
    types = {"train_tokens": "training", "forward_tokens": "training"}
    types |= {"prefill_tokens": "sampling_prefill", "sampled_tokens": "sampling_sample"}
    for e in events["data"]:
        assert e["event_info"]["type"] == types[e["meter"]]
        assert e["estimated_cost_usd"] == pytest.approx(
            float(PRICES[e["meter"]] * e["event_info"]["token_count"] / 1_000_000)
        )
        assert e["effective_rate_usd_per_million_tokens"] == float(PRICES[e["meter"]])
        got[(e["api_key"], e["session_id"], e["meter"])] += e["event_info"]["token_count"]
    assert dict(got) == ledger["expected"]
    assert set(events["sessions"]) == set(ledger["runs"])
    assert charlie.get("billing/usage/events", window).json() == {
        "data": [],
        "sessions": {},
        "cost_data_through": None,
    }


@pytest.mark.parametrize(
    ("starting_on", "ending_before", "field"),
    [
        ("2026-01-01T00:30:00Z", "2026-01-02T00:00:00Z", "starting_on"),
        ("2026-01-01T00:00:00", "2026-01-02T00:00:00Z", "starting_on"),
        ("yesterday", "2026-01-02T00:00:00Z", "starting_on"),
        ("2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z", "ending_before"),
        ("2026-01-01T00:00:00Z", "2026-01-16T00:00:00Z", "ending_before"),
        ("2999-01-01T00:00:00Z", "2999-01-02T00:00:00Z", "starting_on"),
        (None, "2026-01-02T00:00:00Z", "starting_on"),
    ],
)
def test_a_bad_window_is_a_400_naming_it(alice, starting_on, ending_before, field) -> None:
    params = {"ending_before": ending_before}
    if starting_on is not None:
        params["starting_on"] = starting_on
    r = alice.get("billing/usage/events", params)
    assert r.status_code == 400 and r.json()["field"] == field, r.content
