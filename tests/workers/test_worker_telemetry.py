"""A worker's own port: ``/readyz`` follows its lease, ``/healthz`` its heartbeat, ``/metrics``
counts what it ran (latencies, tokens by meter, adapters held), served by a real HTTP server."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.wire import ModelRun, datum, open_session
from workers.telemetry import serve, watch_host

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def port(runtime):
    watch_host(runtime)  # as the worker process does once its runtime exists
    server = serve(0, lambda: runtime, stale_after=60)
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def get(port: int, path: str) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=10)


def samples(port: int) -> dict:
    out = {}
    for family in text_string_to_metric_families(get(port, "/metrics").text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_ready_while_it_holds_its_lease(runtime, port) -> None:
    assert get(port, "/readyz").status_code == 200
    assert get(port, "/healthz").status_code == 200
    runtime.lease.renewed_at -= 3600  # no renewal for an hour: another worker takes its models
    assert get(port, "/readyz").status_code == 503
    runtime.lease.renewed_at += 3600
    runtime.lease.fenced.set()  # its lease taken away
    assert get(port, "/readyz").status_code == 503
    runtime.lease.fenced.clear()
    runtime.lease.beat_at -= 3600  # the heartbeat thread stuck for an hour
    assert get(port, "/healthz").status_code == 503
    assert get(port, "/nothing").status_code == 404


def test_not_ready_before_the_runtime_exists(db) -> None:
    server = serve(0, lambda: None, stale_after=60)
    try:
        assert get(server.server_address[1], "/readyz").status_code == 503
        assert get(server.server_address[1], "/healthz").status_code == 200  # still loading
    finally:
        server.shutdown()
        server.server_close()


def test_operations_latencies_and_tokens(alice, runtime, port) -> None:
    def done(kind: str) -> float:
        key = ("loopwright_worker_operations_total", (("kind", kind), ("outcome", "done")))
        return samples(port).get(key, 0.0)

    before = samples(port)
    fb_before = done("forward_backward")
    run = ModelRun(alice, runtime, open_session(alice))
    body = {"data": [datum([1, 2, 3, 4, 5])], "loss_fn": "cross_entropy"}
    run.run("forward_backward", forward_backward_input=body)
    run.run("forward_backward", forward_backward_input=body)
    after = samples(port)
    assert done("forward_backward") == fb_before + 2
    train = ("loopwright_tokens_total", (("meter", "train_tokens"),))
    assert after[train] - before.get(train, 0.0) == 10
    for name in ("loopwright_operation_queue_seconds", "loopwright_operation_run_seconds"):
        count = (f"{name}_count", (("kind", "forward_backward"),))
        assert after[count] - before.get(count, 0.0) == 2
    assert after[("loopwright_worker_adapters_held", ())] == 1
    assert after[("loopwright_worker_lease_held", ())] == 1
    assert after[("process_resident_memory_bytes", ())] > 50e6
