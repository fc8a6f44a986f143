"""Operation overhead: a small forward_backward through SDK → HTTP → control plane → broker →
worker → engine, against the same engine call in process. Prints p50/p99 of both, their ratio
and the milliseconds the service adds.

    python -m bench.overhead_bench [--backend postgres-redis|embedded] [--n 100]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from loopwright import ServiceClient
from loopwright.types import Datum, ForwardBackwardInput, ModelInput
from tests.e2e.stack import TINY, Stack
from workers.engine.adapters import AdapterConfig
from workers.engine.host import ModelHost

from . import stacks
from .report import parse_with_quick

TOKENS = [104, 101, 108, 108, 111, 32, 119, 111, 114, 108, 100]


def datum() -> Datum:
    return Datum(
        model_input=ModelInput.from_ints(TOKENS[:-1]), loss_fn_inputs={"target_tokens": TOKENS[1:]}
    )


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def time_calls(call, n: int, warmup: int = 5) -> list[float]:
    for _ in range(warmup):
        call()
    out = []
    for _ in range(n):
        start = time.perf_counter()
        call()
        out.append((time.perf_counter() - start) * 1000)
    return out


def measure(backend: str, n: int, block: int = 10) -> tuple[list[float], list[float]]:
    """Both sides in alternating blocks of ``block`` calls, so that a change in the machine's
    load during the run hits both alike; the in-process host lives in this process, the
    service's in its worker (idle while the in-process block runs, and the other way round)."""
    host = ModelHost(TINY)
    host.create_adapter("bench", AdapterConfig(rank=8, seed=0))
    fwd = ForwardBackwardInput(data=[datum()], loss_fn="cross_entropy")
    stack = stacks.start(Stack(backend, Path(tempfile.mkdtemp(prefix="lw-bench-"))))
    try:
        with ServiceClient(
            base_url=stack.url, api_key=stack.keys["alice"], role_arn=stack.roles["alice"]
        ) as svc:
            tc = svc.create_lora_training_client(TINY, rank=8, seed=0)
            data = [datum()]

            def local() -> None:
                host.forward_backward("bench", fwd)

            def remote() -> None:
                tc.forward_backward(data, loss_fn="cross_entropy").result()

            time_calls(local, 0), time_calls(remote, 0)  # warm both up
            ours: list[float] = []
            reference: list[float] = []
            while len(reference) < n:
                size = min(block, n - len(reference))
                reference += time_calls(local, size, warmup=1)
                ours += time_calls(remote, size, warmup=1)
            return reference, ours
    finally:
        stacks.stop(stack)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="postgres-redis", choices=["postgres-redis", "embedded"])
    p.add_argument("--n", type=int, default=100)
    args = parse_with_quick(p, argv, {"n": 5})
    local, remote = measure(args.backend, args.n)
    print(
        f"\nforward_backward, 1 datum × {len(TOKENS) - 1} tokens, tiny model, {args.n} calls "
        f"each side, alternating blocks of 10 ({args.backend})"
    )
    print(
        f"{'':>10} {'in-process ms':>14} {'service ms':>11} {'ratio':>7} {'added ms':>9} {'target':>10}"
    )
    for name, q in (("p50", 0.5), ("p99", 0.99)):
        a, b = percentile(local, q), percentile(remote, q)
        target = "< 15 added" if name == "p50" else ""
        print(f"{name:>10} {a:14.2f} {b:11.2f} {b / a:7.2f} {b - a:9.2f} {target:>10}")
    print(f"{'mean':>10} {statistics.mean(local):14.2f} {statistics.mean(remote):11.2f}")


if __name__ == "__main__":
    main()
