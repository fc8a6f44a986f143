"""Load: many sessions at once, each a user's loop in a thread of its own (our SDK, as users
run it), through a whole stack. Prints operations per second, p50/p99 per kind and the errors.

    python -m bench.load_bench [--sessions 8] [--steps 20] [--workers 2]
    python -m bench.load_bench --url http://cp:8000 --api-key tml-… --role-arn arn:…  # a stack of yours

Without ``--url`` it starts its own stack (PostgreSQL + Redis on this machine, gunicorn, the
given number of worker processes on the tiny model). Each session: a LoRA model, ``--steps``
forward_backward + optim_step pairs (4 datums × 64 tokens), a sample (4 × 16 tokens) every
fifth step from weights saved at its start, a state save at the end, then stop.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from loopwright import ServiceClient
from loopwright.types import AdamParams, Datum, ModelInput, SamplingParams
from tests.e2e.stack import TINY, Stack

from . import stacks
from .overhead_bench import percentile
from .report import parse_with_quick


@dataclass
class Tally:
    """Latencies (ms, submit to result) per kind and errors per kind, from every thread."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def timed(self, kind: str, call: Callable[[], object], since: float | None = None) -> object:
        """``call``'s outcome, its latency kept (from ``since``, a ``perf_counter`` reading,
        where the operation began before the call: a future sent earlier) or its error."""
        started = time.perf_counter() if since is None else since
        try:
            out = call()
        except Exception as exc:
            with self.lock:
                self.errors[kind].append(f"{type(exc).__name__}: {exc}"[:300])
            return None
        with self.lock:
            self.latencies[kind].append((time.perf_counter() - started) * 1000)
        return out


@dataclass(frozen=True)
class Target:
    url: str
    api_key: str
    role_arn: str


def batch(session: int, step: int) -> list[Datum]:
    out = []
    for row in range(4):
        tokens = [(session * 13 + step * 31 + row * 17 + i * 7) % 250 for i in range(65)]
        out.append(
            Datum(
                model_input=ModelInput.from_ints(tokens[:-1]),
                loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * 64},
            )
        )
    return out


def one_session(target: Target, index: int, steps: int, tally: Tally) -> None:
    """A user's loop, start to stop; every call timed and any error counted (never raised)."""
    try:
        with ServiceClient(
            base_url=target.url, api_key=target.api_key, role_arn=target.role_arn
        ) as svc:
            tc = tally.timed(
                "create_model", lambda: svc.create_lora_training_client(TINY, rank=8, seed=index)
            )
            if tc is None:
                return
            sampler = tally.timed(
                "save_weights_for_sampler", lambda: tc.save_weights_and_get_sampling_client("s0")
            )
            params = SamplingParams(max_tokens=16, seed=index, stop=[])
            for step in range(steps):
                data = batch(index, step)
                tally.timed(
                    "forward_backward",
                    lambda data=data: tc.forward_backward(data, "cross_entropy").result(),
                )
                tally.timed(
                    "optim_step", lambda: tc.optim_step(AdamParams(learning_rate=1e-3)).result()
                )
                if sampler is not None and step % 5 == 4:
                    prompt = ModelInput.from_ints([1, 2, 3, index % 200])
                    tally.timed("sample", lambda p=prompt: sampler.sample(p, 4, params).result())
            tally.timed("save_weights", lambda: tc.save_state("end").result())
            tally.timed("stop", tc.stop)
    except Exception as exc:  # the client itself failed: counted, the others go on
        with tally.lock:
            tally.errors["session"].append(f"{type(exc).__name__}: {exc}"[:300])


def drive(target: Target, sessions: int, steps: int, first: int = 0) -> tuple[Tally, float]:
    """``sessions`` loops at once; the tally and the seconds they took together."""
    tally = Tally()
    threads = [
        threading.Thread(target=one_session, args=(target, first + i, steps, tally))
        for i in range(sessions)
    ]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return tally, time.perf_counter() - started


def report(tally: Tally, seconds: float) -> str:
    lines = [f"{'kind':<26}{'n':>6}{'ops/s':>9}{'p50 ms':>10}{'p99 ms':>10}{'errors':>8}"]
    kinds = sorted(set(tally.latencies) | set(tally.errors))
    for kind in kinds:
        ms = tally.latencies.get(kind, [])
        p50 = f"{percentile(ms, 0.5):10.1f}" if ms else f"{'-':>10}"
        p99 = f"{percentile(ms, 0.99):10.1f}" if ms else f"{'-':>10}"
        errors = len(tally.errors.get(kind, []))
        lines.append(f"{kind:<26}{len(ms):>6}{len(ms) / seconds:9.2f}{p50}{p99}{errors:>8}")
    n = sum(len(v) for v in tally.latencies.values())
    errors = sum(len(v) for v in tally.errors.values())
    lines.append(f"{'all':<26}{n:>6}{n / seconds:9.2f}{'':>20}{errors:>8}")
    for kind, messages in sorted(tally.errors.items()):
        lines.append(f"  {kind} error, e.g.: {messages[0]}")
    return "\n".join(lines)


def own_stack(workers: int) -> Stack:
    names = {f"load{i}": [] for i in range(workers)}
    # each session is one of the tenant's: room for every one at once
    env = {"LOOPWRIGHT_MAX_CONCURRENT_SESSIONS": "1000"}
    return Stack("postgres-redis", Path(tempfile.mkdtemp(prefix="lw-load-")), names, env=env)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=8)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--workers", type=int, default=2, help="worker processes of its own stack")
    p.add_argument("--url")
    p.add_argument("--api-key", default=os.environ.get("LOOPWRIGHT_API_KEY"))
    p.add_argument("--role-arn", default=os.environ.get("LOOPWRIGHT_ROLE_ARN"))
    args = parse_with_quick(p, argv, {"sessions": 2, "steps": 2, "workers": 1})
    stack = None
    if args.url:
        target = Target(args.url, args.api_key, args.role_arn)
    else:
        stack = stacks.start(own_stack(args.workers))
        target = Target(stack.url, stack.keys["alice"], stack.roles["alice"])
    try:
        tally, seconds = drive(target, args.sessions, args.steps)
    finally:
        if stack is not None:
            stacks.stop(stack)
    where = args.url or f"a local stack, {args.workers} CPU worker(s) (tiny model)"
    print(
        f"\nload: {args.sessions} sessions × {args.steps} steps at once on {where}: {seconds:.1f} s"
    )
    print(report(tally, seconds))


if __name__ == "__main__":
    main()
