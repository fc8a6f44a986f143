"""The worker's packed passes through the whole stack: N sessions (two tenants, alternating) each
running a loop of forward_backward + optim_step, then of samples, at once, through our SDK,
gunicorn, PostgreSQL and one worker process on the tiny model. Prints operations per second,
forward_backward p50/p99, the operations per engine call the worker reports, and each N's
throughput as a ratio to one session alone.

    python -m bench.scheduler_bench [--sessions 1,2,4,8] [--steps 30] [--pass-tokens 16384]

``--pass-tokens 1`` puts every forward_backward and sample over the budget, so each runs alone
in its own engine call, as before the worker packed sessions together (same stack, same loop;
optim_steps, which count no tokens, still share a call).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from loopwright import ServiceClient
from loopwright.types import AdamParams, Datum, ModelInput, SamplingParams
from tests.e2e.stack import TINY, Stack, free_port

from . import stacks
from .load_bench import Tally
from .overhead_bench import percentile
from .report import parse_with_quick

TARGET_OPS = 200.0  # operations/s at 8 sessions
TARGET_P99_MS = 250.0  # forward_backward p99 at 8 sessions


@dataclass(frozen=True)
class Workload:
    steps: int
    datums: int
    tokens: int
    samples: int  # sample requests per session
    sample_tokens: int


def batch(session: int, step: int, w: Workload) -> list[Datum]:
    out = []
    for row in range(w.datums):
        seq = [(session * 13 + step * 31 + row * 17 + i * 7) % 250 for i in range(w.tokens + 1)]
        out.append(
            Datum(
                model_input=ModelInput.from_ints(seq[:-1]),
                loss_fn_inputs={"target_tokens": seq[1:], "weights": [1.0] * w.tokens},
            )
        )
    return out


def _client(stack: Stack, index: int) -> ServiceClient:
    who = ("alice", "charlie")[index % 2]  # two tenants
    return ServiceClient(base_url=stack.url, api_key=stack.keys[who], role_arn=stack.roles[who])


def _together(count: int, loop) -> float:
    """``loop(index, ready)`` in ``count`` threads; each sets up, waits at the barrier, then runs
    its timed part. Seconds from the barrier to the last thread's end."""
    barrier = threading.Barrier(count + 1)
    threads = [threading.Thread(target=loop, args=(i, barrier)) for i in range(count)]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    return time.perf_counter() - started


def training(stack: Stack, count: int, w: Workload) -> tuple[Tally, float]:
    tally = Tally()

    def loop(index: int, ready: threading.Barrier) -> None:
        with _client(stack, index) as svc:
            tc = svc.create_lora_training_client(TINY, rank=8, seed=index)
            ready.wait()
            for step in range(w.steps):
                data = batch(index, step, w)
                tally.timed(
                    "forward_backward",
                    lambda data=data: tc.forward_backward(data, "cross_entropy").result(),
                )
                tally.timed(
                    "optim_step", lambda: tc.optim_step(AdamParams(learning_rate=1e-3)).result()
                )
            tc.stop()

    return tally, _together(count, loop)


def sampling(stack: Stack, count: int, w: Workload) -> tuple[Tally, float]:
    tally = Tally()

    def loop(index: int, ready: threading.Barrier) -> None:
        with _client(stack, index) as svc:
            sampler = svc.create_sampling_client(base_model=TINY)
            params = SamplingParams(max_tokens=w.sample_tokens, seed=index, stop=[])
            prompt = ModelInput.from_ints([1, 2, 3, index % 200])
            ready.wait()
            for _ in range(w.samples):
                tally.timed("sample", lambda: sampler.sample(prompt, 4, params).result())

    return tally, _together(count, loop)


def ops_per_call(metrics_url: str) -> dict[str, tuple[float, float]]:
    """(operations, engine calls) per kind, from the worker's own /metrics."""
    text = httpx.get(metrics_url, timeout=10).text
    out: dict[str, list[float]] = {}
    for line in text.splitlines():
        for suffix, slot in (("_sum", 0), ("_count", 1)):
            name = f"loopwright_worker_engine_call_operations{suffix}"
            if line.startswith(name + "{"):
                kind = line.split('kind="', 1)[1].split('"', 1)[0]
                out.setdefault(kind, [0.0, 0.0])[slot] = float(line.rsplit(" ", 1)[1])
    return {k: (v[0], v[1]) for k, v in out.items()}


def _delta(after: dict, before: dict, kind: str) -> str:
    ops = after.get(kind, (0, 0))[0] - before.get(kind, (0, 0))[0]
    calls = after.get(kind, (0, 0))[1] - before.get(kind, (0, 0))[1]
    return f"{ops / calls:5.2f}" if calls else "    -"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", default="1,2,4,8")
    p.add_argument("--steps", type=int, default=30, help="forward_backward + optim_step pairs")
    p.add_argument("--datums", type=int, default=1)
    p.add_argument("--tokens", type=int, default=32, help="tokens per datum")
    p.add_argument("--samples", type=int, default=15, help="sample requests per session")
    p.add_argument("--sample-tokens", type=int, default=16)
    p.add_argument("--pass-tokens", type=int, default=16384)
    p.add_argument("--threads", type=int, help="OMP_NUM_THREADS of every process of the stack")
    args = parse_with_quick(p, argv, {"sessions": "1,2", "steps": 3, "samples": 2})
    w = Workload(args.steps, args.datums, args.tokens, args.samples, args.sample_tokens)
    counts = [int(n) for n in args.sessions.split(",")]
    port = free_port()
    env = {
        "LOOPWRIGHT_MAX_CONCURRENT_SESSIONS": "1000",
        "LOOPWRIGHT_WORKER_PASS_TOKENS": str(args.pass_tokens),
        "LOOPWRIGHT_WORKER_METRICS_PORT": str(port),
    }
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    stack = stacks.start(
        Stack("postgres-redis", Path(tempfile.mkdtemp(prefix="lw-sched-")), {"sched0": []}, env=env)
    )
    metrics_url = f"http://127.0.0.1:{stack.env['LOOPWRIGHT_WORKER_METRICS_PORT']}/metrics"
    rows = []
    try:
        training(stack, 1, Workload(3, w.datums, w.tokens, 1, w.sample_tokens))  # warm up
        for count in counts:
            before = ops_per_call(metrics_url)
            tally, seconds = training(stack, count, w)
            after = ops_per_call(metrics_url)
            fb = tally.latencies["forward_backward"]
            n = sum(len(v) for v in tally.latencies.values())
            errors = sum(len(v) for v in tally.errors.values())
            per_call = (
                f"{_delta(after, before, 'forward_backward')}/{_delta(after, before, 'optim_step')}"
            )
            rows.append(("train", count, n / seconds, fb, per_call, errors))
        for count in counts:
            before = ops_per_call(metrics_url)
            tally, seconds = sampling(stack, count, w)
            after = ops_per_call(metrics_url)
            ms = tally.latencies["sample"]
            errors = sum(len(v) for v in tally.errors.values())
            rows.append(
                ("sample", count, len(ms) / seconds, ms, _delta(after, before, "sample"), errors)
            )
    finally:
        stacks.stop(stack)
    print(
        f"\n1 worker (tiny model, cpu, threads {args.threads or 'default'}), pass budget "
        f"{args.pass_tokens} tokens; training: "
        f"{w.steps} × (forward_backward {w.datums}×{w.tokens} tokens + optim_step) per session; "
        f"sampling: {w.samples} × (4 samples × {w.sample_tokens} tokens) per session; "
        "sessions alternate between two tenants"
    )
    header = f"{'loop':<7}{'sessions':>9}{'ops/s':>9}{'vs 1':>7}{'p50 ms':>9}{'p99 ms':>9}"
    print(header + f"{'ops/call':>12}{'errors':>8}")
    alone: dict[str, float] = {}
    for loop, count, rate, ms, per_call, errors in rows:
        alone.setdefault(loop, rate)
        p50, p99 = percentile(ms, 0.5), percentile(ms, 0.99)
        print(
            f"{loop:<7}{count:>9}{rate:9.1f}{rate / alone[loop]:7.2f}{p50:9.1f}{p99:9.1f}"
            f"{per_call:>12}{errors:>8}"
        )
    print("(train: p50/p99 of forward_backward, ops/call = forward_backward/optim_step)")
    eight = [r for r in rows if r[0] == "train" and r[1] == 8]
    if eight:
        _, _, rate, fb, _, _ = eight[0]
        p99 = percentile(fb, 0.99)
        met = rate >= TARGET_OPS and p99 <= TARGET_P99_MS
        print(
            f"8 sessions: {rate:.1f} ops/s (target ≥ {TARGET_OPS:.0f}), forward_backward p99 "
            f"{p99:.1f} ms (target ≤ {TARGET_P99_MS:.0f}): {'met' if met else 'NOT met'}"
        )


if __name__ == "__main__":
    main()
