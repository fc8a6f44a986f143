"""Metrics and logs of real processes: gunicorn with two processes (the production config file)
answering ``/metrics`` only on its metrics port and with the token, the counts of both processes
added up; a worker process's own port; JSON logs with the request and operation ids."""

from __future__ import annotations

import json
import sys

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from loopwright import ServiceClient
from loopwright.types import AdamParams, Datum, ModelInput, SamplingParams

from .stack import TINY, Stack, free_port

pytestmark = [pytest.mark.e2e]
TOKEN = "scrape-token-e2e"


class ProductionHttp(Stack):
    """The control plane started as the images start it: ``controlplane/gunicorn_conf.py``."""

    def start_http(self) -> None:
        self.http_proc = self._spawn(
            "http",
            [sys.executable, "-m", "gunicorn", "-c", "python:controlplane.gunicorn_conf",
             "controlplane.wsgi:application"],
            group=True,
        )  # fmt: skip


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    ports = {"http": 0, "metrics": free_port(), "worker": free_port()}
    s = ProductionHttp(
        "postgres-redis",
        tmp_path_factory.mktemp("metrics"),
        env={
            "LOOPWRIGHT_HTTP_HOST": "127.0.0.1",
            "LOOPWRIGHT_HTTP_WORKERS": "2",
            "LOOPWRIGHT_HTTP_THREADS": "8",
            "LOOPWRIGHT_METRICS_PORT": str(ports["metrics"]),
            "LOOPWRIGHT_METRICS_TOKEN": TOKEN,
            "LOOPWRIGHT_WORKER_METRICS_PORT": str(ports["worker"]),
            "LOOPWRIGHT_LOG_FORMAT": "json",
        },
    )
    s.env["LOOPWRIGHT_HTTP_PORT"] = str(s.port)
    s.metrics_port, s.worker_port = ports["metrics"], ports["worker"]
    s.worker_loglevel = "INFO"  # each operation's line
    s.start()
    try:
        yield s
    finally:
        s.stop()


def parse(text: str) -> dict:
    out: dict = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def total(samples: dict, name: str, **labels) -> float:
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


def loop(stack: Stack, steps: int) -> int:
    """A few steps and a sample; the train tokens sent."""
    tokens = [(i * 7) % 250 for i in range(33)]
    data = [
        Datum(
            model_input=ModelInput.from_ints(tokens[:-1]),
            loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * 32},
        )
    ] * 2
    with ServiceClient(
        base_url=stack.url, api_key=stack.keys["alice"], role_arn=stack.roles["alice"]
    ) as svc:
        tc = svc.create_lora_training_client(TINY, rank=4, seed=1)
        for _ in range(steps):
            tc.forward_backward(data, "cross_entropy").result()
            tc.optim_step(AdamParams(learning_rate=1e-3)).result()
        sampler = tc.save_weights_and_get_sampling_client("m")
        params = SamplingParams(max_tokens=8, seed=1, stop=[])
        sampler.sample(ModelInput.from_ints([1, 2, 3]), 2, params).result()
        tc.stop()
    return steps * 64


def test_control_plane_metrics_behind_their_port_and_token(stack) -> None:
    loop(stack, 3)
    metrics_url = f"http://127.0.0.1:{stack.metrics_port}/metrics"
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert httpx.get(f"{stack.url}/metrics", headers=bearer).status_code == 404  # the API port
    assert httpx.get(metrics_url).status_code == 404  # no token
    r = httpx.get(metrics_url, headers=bearer)
    assert r.status_code == 200
    samples = parse(r.text)
    # both gunicorn processes answered requests; their counts are added up
    assert total(samples, "loopwright_http_requests_total", route="api/v1/forward_backward") >= 3
    assert total(samples, "loopwright_workers", state="active") == 1
    assert total(samples, "loopwright_queue_depth") == 0
    pids = {json.loads(line).get("event", "") for line in _lines(stack, "http")}
    assert sum("Booting worker" in e for e in pids) == 2  # gunicorn's own lines, as JSON


def test_worker_metrics_and_probes(stack) -> None:
    base = f"http://127.0.0.1:{stack.worker_port}"
    before = parse(httpx.get(f"{base}/metrics").text)
    train = loop(stack, 2)
    after = parse(httpx.get(f"{base}/metrics").text)
    assert httpx.get(f"{base}/readyz").status_code == 200
    assert httpx.get(f"{base}/healthz").status_code == 200

    def grew(name: str, **labels) -> float:
        return total(after, name, **labels) - total(before, name, **labels)

    assert grew("loopwright_worker_operations_total", kind="forward_backward", outcome="done") == 2
    assert grew("loopwright_tokens_total", meter="train_tokens") == train
    assert grew("loopwright_tokens_total", meter="sampled_tokens") == 16
    assert grew("loopwright_operation_queue_seconds_count", kind="optim_step") == 2
    assert grew("loopwright_operation_run_seconds_count", kind="sample") == 1
    assert total(after, "process_resident_memory_bytes") > 100e6
    assert total(after, "loopwright_worker_info", worker=stack.worker_name, base_model=TINY) == 1


def test_worker_logs_are_json_with_operation_ids(stack) -> None:
    lines = [json.loads(line) for line in _lines(stack, "worker")]
    ran = [x for x in lines if x.get("kind") == "forward_backward" and "seq=" in x["event"]]
    assert ran and all(x["operation_id"].startswith("req-") for x in ran)
    assert all({"timestamp", "level", "logger"} <= x.keys() for x in ran)


def _lines(stack: Stack, name: str) -> list[str]:
    text = (stack.data_dir / f"{name}.log").read_text()
    return [line for line in text.splitlines() if line.startswith("{")]
