"""``/metrics``: work by kind and state, queue depth and age per worker, failovers and quota
refusals, read by a Prometheus parser; nothing of any tenant's in it; the token and port guards;
the request id on every answer and in the JSON logs."""

from __future__ import annotations

import io
import json
import logging
import logging.config
import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from controlplane.observability.logs import logging_config
from controlplane.training_sessions.models import Operation, Recovery, Session, TrainingModel
from tests.support.tiny_worker import TINY
from tests.support.wire import ModelRun, datum, fwdbwd, open_session

TOKEN = "metrics-token-of-these-tests"


@pytest.fixture(autouse=True)
def metrics_token(settings):
    """The scrape token these tests send (the embedded default makes one; so does production)."""
    settings.METRICS_TOKEN = TOKEN


def scrape(client: Client | None = None, **headers) -> dict[tuple[str, tuple], float]:
    headers.setdefault("HTTP_AUTHORIZATION", f"Bearer {TOKEN}")
    r = (client or Client()).get("/metrics", **headers)
    assert r.status_code == 200, r.content
    assert r["Content-Type"].startswith("text/plain; version=")
    samples = {}
    for family in text_string_to_metric_families(r.content.decode()):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_waiting_work_per_worker_and_kind(alice, charlie, runtime) -> None:
    run = ModelRun(alice, runtime, open_session(alice))
    for seq in (1, 2, 3):  # submitted, not drained: they wait on the worker
        r = alice.post("forward_backward", fwdbwd(run.id, seq, [datum([1, 2, 3])]))
        assert r.status_code == 200
    Operation.objects.filter(model_id=run.id, seq_id=1).update(
        created_at=timezone.now() - timedelta(seconds=42)
    )
    samples = scrape()
    assert value(samples, "loopwright_operations", kind="forward_backward", state="pending") == 3
    assert value(samples, "loopwright_operations", kind="sample", state="running") == 0
    assert value(samples, "loopwright_queue_depth", worker="test0") == 3
    assert 42 <= value(samples, "loopwright_queue_oldest_seconds", worker="test0") < 100
    assert value(samples, "loopwright_workers", state="active") == 1
    assert 500 < value(samples, "loopwright_worker_lease_seconds_left", worker="test0") <= 600

    runtime.drain()
    samples = scrape()
    assert value(samples, "loopwright_operations", kind="forward_backward", state="pending") == 0
    assert value(samples, "loopwright_queue_depth", worker="test0") == 0
    assert value(samples, "loopwright_queue_oldest_seconds", worker="test0") == 0


def test_failovers_by_cause_and_how_long_they_took(alice, runtime) -> None:
    run = ModelRun(alice, runtime, open_session(alice))
    model = Operation.objects.filter(model_id=run.id).first().model
    now = timezone.now()
    for cause, seconds in (("worker_lost", 4.0), ("worker_lost", 6.0), ("worker_stopped", None)):
        Recovery.objects.create(
            tenant=model.tenant, session=model.session, model=model, cause=cause,
            from_worker="gone0", to_worker="test0", declared_at=now, declared_by="janitor",
            restored_at=now + timedelta(seconds=seconds) if seconds else None,
            outcome="restored" if seconds else "restoring",
        )  # fmt: skip
    samples = scrape()
    assert (
        value(samples, "loopwright_failovers_total", cause="worker_lost", outcome="restored") == 2
    )
    assert (
        value(samples, "loopwright_failovers_total", cause="worker_stopped", outcome="restoring")
        == 1
    )
    assert value(samples, "loopwright_failover_recovery_seconds_count") == 2
    assert value(samples, "loopwright_failover_recovery_seconds_sum") == pytest.approx(10.0)


def test_quota_refusals_by_limit(alice, settings) -> None:
    before = value(scrape(), "loopwright_quota_refusals_total", limit="concurrent_sessions")
    settings.MAX_CONCURRENT_SESSIONS = 1
    open_session(alice)
    r = alice.post("create_session", {"tags": [], "sdk_version": "t", "role_arn": alice.role_arn})
    assert r.status_code == 429
    after = value(scrape(), "loopwright_quota_refusals_total", limit="concurrent_sessions")
    assert after == before + 1


def test_requests_are_counted_by_pattern_never_by_path(alice, runtime) -> None:
    session_id = open_session(alice)
    alice.get(f"sessions/{session_id}")
    text = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").content.decode()
    assert 'route="api/v1/sessions/<str:session_id>"' in text or "sessions/<" in text
    assert session_id not in text


def test_nothing_of_any_tenant_is_exposed(alice, charlie, runtime) -> None:
    run = ModelRun(alice, runtime, open_session(alice))
    run.run("forward_backward", forward_backward_input={"data": [datum([1, 2])], "loss_fn": "cross_entropy"})  # fmt: skip
    open_session(charlie)
    text = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").content.decode()
    secrets = [run.id, alice.tenant.account_id, charlie.tenant.account_id, alice.key, charlie.key]
    secrets += list(Session.objects.values_list("id", flat=True))
    secrets += ["alice", "charlie", "acme", "example.com"]
    assert not [s for s in secrets if s in text]


def test_the_token_guard(settings, db) -> None:
    settings.METRICS_TOKEN = "s3cret-scrape-token"
    assert Client().get("/metrics").status_code == 404
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 404
    scrape(HTTP_AUTHORIZATION="Bearer s3cret-scrape-token")


def test_the_port_guard(settings, db) -> None:
    settings.METRICS_PORT = 9100
    settings.METRICS_TOKEN = ""
    assert Client().get("/metrics", SERVER_PORT="8000").status_code == 404
    scrape(SERVER_PORT="9100", HTTP_AUTHORIZATION="")


def test_with_neither_guard_nobody_is_answered(settings, db) -> None:
    settings.METRICS_PORT, settings.METRICS_TOKEN = 0, ""
    assert Client().get("/metrics").status_code == 404


def test_every_answer_carries_a_request_id(db) -> None:
    mine = Client().get("/api/v1/healthz", HTTP_X_REQUEST_ID="trace-abc.123")
    assert mine["X-Request-ID"] == "trace-abc.123"
    odd = Client().get("/api/v1/healthz", HTTP_X_REQUEST_ID="<script>")
    made = Client().get("/api/v1/healthz")
    assert odd["X-Request-ID"] != "<script>" and len(made["X-Request-ID"]) == 16
    assert odd["X-Request-ID"] != made["X-Request-ID"]


def test_json_logs_carry_the_request_id(db) -> None:
    stream = io.StringIO()
    config = logging_config(fmt="json", level="INFO")
    config["handlers"]["console"]["stream"] = stream
    config["loggers"]["django.request"] = {"level": "WARNING", "handlers": [], "propagate": True}
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    logging.config.dictConfig(config)
    try:
        r = Client().get("/api/v1/no-such-endpoint", HTTP_X_REQUEST_ID="req-id-77")
        assert r.status_code == 404
    finally:
        root.handlers, root.level = saved[0], saved[1]
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    found = [x for x in lines if x.get("logger") == "django.request"]
    assert found and found[0]["request_id"] == "req-id-77"
    assert found[0]["level"] == "warning" and "timestamp" in found[0]


def test_the_grafana_dashboard_asks_only_for_metrics_that_exist(db) -> None:
    from pathlib import Path

    from prometheus_client import REGISTRY, CollectorRegistry, generate_latest

    from controlplane.observability.collectors import DatabaseCollector

    database = CollectorRegistry(auto_describe=False)
    database.register(DatabaseCollector())
    text = (generate_latest(REGISTRY) + generate_latest(database)).decode()
    suffixes = {
        "counter": ["_total"],
        "histogram": ["_bucket", "_sum", "_count"],
        "summary": ["_sum", "_count"],
    }
    exposed = set()
    for family in text_string_to_metric_families(text):
        exposed |= {family.name + s for s in suffixes.get(family.type, [""])}
    board = Path(__file__).resolve().parents[3] / "infra/grafana/loopwright-dashboard.json"
    exprs = [
        t["expr"] for p in json.loads(board.read_text())["panels"] for t in p.get("targets", [])
    ]
    used = {m for e in exprs for m in re.findall(r"\b(?:loopwright|process)_[a-z_]+\b", e)}
    assert len(exprs) >= 15 and len(used) >= 15
    assert used <= exposed, sorted(used - exposed)


def test_the_placement_queue_by_base_model_and_what_it_waits_for(alice, runtime) -> None:
    from controlplane.fleet.models import Worker
    from tests.support.wire import create_model

    Worker.objects.update(capacity=1)
    create_model(alice, runtime, open_session(alice))
    for _ in range(2):  # no room: they wait for a slot
        r = alice.post(
            "create_model",
            {"session_id": open_session(alice), "model_seq_id": 0, "base_model": TINY},
        )
        assert r.status_code == 200
    TrainingModel.objects.filter(worker__isnull=True).update(
        queued_at=timezone.now() - timedelta(seconds=30)
    )
    samples = scrape()
    assert value(samples, "loopwright_placement_queue", base_model=TINY, waits_for="capacity") == 2
    assert 30 <= value(samples, "loopwright_placement_queue_oldest_seconds", base_model=TINY) < 90
