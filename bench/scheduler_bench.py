"""The worker's packed passes through the whole stack: N sessions (two tenants, alternating) each
running a loop of forward_backward + optim_step, then of samples, at once, through our SDK,
gunicorn, PostgreSQL and one worker process on the tiny model. Prints operations per second,
forward_backward p50/p99, the operations per engine call the worker reports, and each N's
throughput as a ratio to one session alone; then where an operation's time went, from the
worker's own metrics: its mean wait from submit to claim (``queue``), from claim to recorded
completion (``run``), the rest of the round trip (the client, HTTP, the control plane and the
notice back: the mean latency less both), and how busy the worker's engine was (its CPU in
engine calls over the loop's wall time).

    python -m bench.scheduler_bench [--sessions 1,2,4,8] [--steps 30] [--pass-tokens 16384]
                                    [--pipelined]

``--pipelined``: each training step sends forward_backward and optim_step before waiting for
either, as the example loop does (the default waits for each before sending the next).

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


def training(
    stack: Stack, count: int, w: Workload, *, pipelined: bool = False
) -> tuple[Tally, float]:
    tally = Tally()

    def loop(index: int, ready: threading.Barrier) -> None:
        with _client(stack, index) as svc:
            tc = svc.create_lora_training_client(TINY, rank=8, seed=index)
            ready.wait()
            for step in range(w.steps):
                data = batch(index, step, w)
                if pipelined:
                    _pipelined_step(tally, tc, data)
                    continue
                tally.timed(
                    "forward_backward",
                    lambda data=data: tc.forward_backward(data, "cross_entropy").result(),
                )
                tally.timed(
                    "optim_step", lambda: tc.optim_step(AdamParams(learning_rate=1e-3)).result()
                )
            tc.stop()

    return tally, _together(count, loop)


def _pipelined_step(tally: Tally, tc, data: list[Datum]) -> None:
    """Both sent, then both awaited; each one's latency from the step's start to its result."""
    started = time.perf_counter()
    fb = tc.forward_backward(data, "cross_entropy")
    opt = tc.optim_step(AdamParams(learning_rate=1e-3))
    tally.timed("forward_backward", fb.result, since=started)
    tally.timed("optim_step", opt.result, since=started)


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


SERIES = {
    "loopwright_worker_engine_call_operations": "calls",
    "loopwright_operation_queue_seconds": "queue",
    "loopwright_operation_run_seconds": "run",
}


def worker_metrics(metrics_url: str) -> dict[tuple[str, str], tuple[float, float]]:
    """(sum, count) per (series, kind) of the worker's histograms that the rows need, and
    ("engine", "cpu") the CPU seconds of its engine calls, from its own /metrics."""
    text = httpx.get(metrics_url, timeout=10).text
    out: dict[tuple[str, str], list[float]] = {("engine", "cpu"): [0.0, 0.0]}
    for line in text.splitlines():
        if line.startswith("loopwright_worker_engine_cpu_seconds_total{"):
            out["engine", "cpu"][0] += float(line.rsplit(" ", 1)[1])
            continue
        for name, series in SERIES.items():
            for suffix, slot in (("_sum", 0), ("_count", 1)):
                if line.startswith(name + suffix + "{"):
                    kind = line.split('kind="', 1)[1].split('"', 1)[0]
                    out.setdefault((series, kind), [0.0, 0.0])[slot] = float(line.rsplit(" ", 1)[1])
    return {k: (v[0], v[1]) for k, v in out.items()}


@dataclass(frozen=True)
class Spent:
    """Where one loop's operations of ``kind`` spent their time, from the worker's metrics
    before and after the loop."""

    per_call: float | None  # operations per engine call
    queue_ms: float | None  # mean, submit to claim
    run_ms: float | None  # mean, claim to recorded completion
    engine_busy: float  # engine CPU seconds over the loop's wall seconds

    @classmethod
    def between(cls, before: dict, after: dict, kind: str, seconds: float) -> Spent:
        def delta(series: str) -> tuple[float, float]:
            (s1, c1), (s0, c0) = (
                after.get((series, kind), (0, 0)),
                before.get((series, kind), (0, 0)),
            )
            return s1 - s0, c1 - c0

        def mean(series: str, scale: float = 1.0) -> float | None:
            total, count = delta(series)
            return total / count * scale if count else None

        busy = after["engine", "cpu"][0] - before["engine", "cpu"][0]
        return cls(mean("calls"), mean("queue", 1000), mean("run", 1000), busy / seconds)


def _cell(value: float | None, width: int, fmt: str = ".2f") -> str:
    return f"{value:>{width}{fmt}}" if value is not None else f"{'-':>{width}}"


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
    p.add_argument(
        "--pipelined", action="store_true", help="send optim_step before forward_backward's result"
    )
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
    rows: list[Row] = []
    try:
        training(stack, 1, Workload(3, w.datums, w.tokens, 1, w.sample_tokens))  # warm up
        for count in counts:
            before = worker_metrics(metrics_url)
            tally, seconds = training(stack, count, w, pipelined=args.pipelined)
            after = worker_metrics(metrics_url)
            rows.append(Row.of("train", count, tally, seconds, before, after, TRAINING))
        for count in counts:
            before = worker_metrics(metrics_url)
            tally, seconds = sampling(stack, count, w)
            after = worker_metrics(metrics_url)
            rows.append(Row.of("sample", count, tally, seconds, before, after, ("sample",)))
    finally:
        stacks.stop(stack)
    print(
        f"\n1 worker (tiny model, cpu, threads {args.threads or 'default'}), pass budget "
        f"{args.pass_tokens} tokens; training: "
        f"{w.steps} × (forward_backward {w.datums}×{w.tokens} tokens + optim_step) per session"
        f"{', both sent before waiting' if args.pipelined else ''}; "
        f"sampling: {w.samples} × (4 samples × {w.sample_tokens} tokens) per session; "
        "sessions alternate between two tenants"
    )
    header = f"{'loop':<7}{'sessions':>9}{'ops/s':>9}{'vs 1':>7}{'p50 ms':>9}{'p99 ms':>9}"
    print(header + f"{'ops/call':>12}{'errors':>8}")
    alone: dict[str, float] = {}
    for row in rows:
        alone.setdefault(row.loop, row.rate)
        p50, p99 = percentile(row.ms, 0.5), percentile(row.ms, 0.99)
        per_call = "/".join(_cell(row.spent[k].per_call, 5) for k in row.kinds)
        print(
            f"{row.loop:<7}{row.count:>9}{row.rate:9.1f}{row.rate / alone[row.loop]:7.2f}"
            f"{p50:9.1f}{p99:9.1f}{per_call:>12}{row.errors:>8}"
        )
    print("(train: p50/p99 of forward_backward, ops/call = forward_backward/optim_step)")
    print(
        "\nwhere the time went, means per operation (ms): queue = submit to claim, run = claim "
        "to recorded completion,\nrest = the round trip's remainder (client, HTTP, control "
        "plane, the notice back); engine = the worker's engine CPU over wall time"
    )
    print(f"{'loop':<7}{'sessions':>9}{'kind':>18}{'mean':>8}{'queue':>8}{'run':>8}{'rest':>8}"
          f"{'engine':>8}")  # fmt: skip
    for row in rows:
        for kind in row.kinds:
            spent, ms = row.spent[kind], row.tally.latencies.get(kind, [])
            mean = sum(ms) / len(ms) if ms else None
            rest = (
                mean - spent.queue_ms - spent.run_ms
                if None not in (mean, spent.queue_ms, spent.run_ms)
                else None
            )
            print(
                f"{row.loop:<7}{row.count:>9}{kind:>18}{_cell(mean, 8, '.1f')}"
                f"{_cell(spent.queue_ms, 8, '.1f')}{_cell(spent.run_ms, 8, '.1f')}"
                f"{_cell(rest, 8, '.1f')}{spent.engine_busy:8.0%}"
            )
    eight = [r for r in rows if r.loop == "train" and r.count == 8]
    if eight:
        rate, p99 = eight[0].rate, percentile(eight[0].ms, 0.99)
        met = rate >= TARGET_OPS and p99 <= TARGET_P99_MS
        print(
            f"8 sessions: {rate:.1f} ops/s (target ≥ {TARGET_OPS:.0f}), forward_backward p99 "
            f"{p99:.1f} ms (target ≤ {TARGET_P99_MS:.0f}): {'met' if met else 'NOT met'}"
        )


TRAINING = ("forward_backward", "optim_step")


@dataclass(frozen=True)
class Row:
    loop: str
    count: int
    rate: float  # operations per second
    ms: list[float]  # the latencies the row's percentiles are of (forward_backward, sample)
    errors: int
    kinds: tuple[str, ...]
    tally: Tally
    spent: dict[str, Spent]

    @classmethod
    def of(
        cls,
        loop: str,
        count: int,
        tally: Tally,
        seconds: float,
        before: dict,
        after: dict,
        kinds: tuple[str, ...],
    ) -> Row:
        done = sum(len(v) for v in tally.latencies.values())
        errors = sum(len(v) for v in tally.errors.values())
        spent = {k: Spent.between(before, after, k, seconds) for k in kinds}
        return cls(
            loop, count, done / seconds, tally.latencies[kinds[0]], errors, kinds, tally, spent
        )


if __name__ == "__main__":
    main()
