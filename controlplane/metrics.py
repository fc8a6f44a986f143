"""The metrics every process updates, served at ``/metrics`` by ``controlplane.observability``
(low in the layers, so any app may count). Labels carry kinds, states, meters and worker names
only: never a tenant, session, model or key, so ``/metrics`` shows nothing of any customer's.

On gunicorn with several worker processes set ``PROMETHEUS_MULTIPROC_DIR`` (an empty folder per
start): the counters then add up across processes (``controlplane/gunicorn_conf.py``).
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

# Seconds from a few milliseconds (a small step on a GPU) to minutes (a queue behind a restore).
LATENCY_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
)  # fmt: skip

# -- the control plane -------------------------------------------------------------------
HTTP_REQUESTS = Counter(
    "loopwright_http_requests",
    "HTTP requests answered, by method, URL pattern and status code",
    ["method", "route", "status"],
)
HTTP_SECONDS = Histogram(
    "loopwright_http_request_duration_seconds",
    "Time inside the application per request, by method and URL pattern (streamed answers: "
    "until their first line)",
    ["method", "route"],
    buckets=LATENCY_BUCKETS,
)
QUOTA_REFUSALS = Counter(
    "loopwright_quota_refusals",
    "Requests refused by a tenant quota, by the limit that refused them",
    ["limit"],
)

# -- the workers -------------------------------------------------------------------------
OPERATIONS_FINISHED = Counter(
    "loopwright_worker_operations",
    "Operations this worker finished, by kind and outcome (done, failed, retried)",
    ["kind", "outcome"],
)
QUEUE_SECONDS = Histogram(
    "loopwright_operation_queue_seconds",
    "Submit to start: from the operation's row being written to its claim by a worker",
    ["kind"],
    buckets=LATENCY_BUCKETS,
)
RUN_SECONDS = Histogram(
    "loopwright_operation_run_seconds",
    "Start to done: from its claim to its completion being recorded",
    ["kind"],
    buckets=LATENCY_BUCKETS,
)
TOKENS = Counter(
    "loopwright_tokens",
    "Tokens processed by completed operations, by billing meter (rate(): tokens per second)",
    ["meter"],
)
ENGINE_CALL_OPERATIONS = Histogram(
    "loopwright_worker_engine_call_operations",
    "Operations of (possibly many sessions) run together in one engine call, by kind",
    ["kind"],
    buckets=(1, 2, 4, 8, 16, 32, 64),
)
ENGINE_CPU_SECONDS = Counter(
    "loopwright_worker_engine_cpu_seconds",
    "CPU time of this worker process (all its threads) inside engine calls, by engine method: "
    "the rest of the process's CPU time is the worker's own (claims, completions, the broker)",
    ["call"],
)
ENGINE_CALLS = Counter(
    "loopwright_worker_engine_calls", "Engine calls this worker made, by engine method", ["call"]
)
ADAPTERS_HELD = Gauge(
    "loopwright_worker_adapters_held",
    "LoRA adapters (training models) this worker holds, loaded or spilled to disk",
)
ADAPTERS_LOADED = Gauge(
    "loopwright_worker_adapters_loaded", "LoRA adapters this worker keeps in accelerator memory"
)
LEASE_HELD = Gauge("loopwright_worker_lease_held", "1 while this worker holds a live lease, else 0")
WORKER_INFO = Gauge(
    "loopwright_worker_info",
    "This worker's name, base model and device (always 1)",
    ["worker", "base_model", "device"],
)
