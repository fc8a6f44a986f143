"""Failover: how long a training loop pauses when the worker holding its model is killed, and
what the service's automatic snapshots cost a loop that nothing happens to.

1. Recovery: a loop of forward_backward + optim_step runs against two workers (PostgreSQL +
   Redis, default settings: a 10 s lease, a snapshot every 20 steps); ``--kills`` times, the
   worker holding the model is killed with SIGKILL and started again once the other took the
   model over. Prints, per kill and as p50 / max, the seconds from the kill to the first
   operation completed after it (target: under 30 s).
2. Throughput: the same loop on a worker with snapshots on (defaults) and on one with them off,
   in alternating blocks; prints steps/s of each and their ratio (target: at least 0.95).
3. Chaos (``bench/chaos_pause.py``): six seeded loops of two tenants on three workers; two
   workers and the control plane are killed with SIGKILL, the control plane started again.
   Every loop must end exact and billed once; prints each loop's longest pause between two
   completed operations (target: under 15 s). Its quick preset runs on its own
   (``python -m bench.chaos_pause --quick``).

    python -m bench.failover_bench [--kills 10] [--steps 300] [--skip PART ...]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from loopwright import ServiceClient
from loopwright.types import AdamParams, Datum, ModelInput
from tests.e2e.chaos import database, holder, wait_registered
from tests.e2e.stack import TINY, Stack

from . import chaos_pause
from .report import parse_with_quick

WORKERS = ("on", "off")


def batch(step: int, rows: int = 4, tokens: int = 64) -> list[Datum]:
    data = []
    for row in range(rows):
        ids = [(step * 13 + row * 7 + i * 3) % 250 for i in range(tokens + 1)]
        data.append(
            Datum(
                model_input=ModelInput.from_ints(ids[:-1]),
                loss_fn_inputs={"target_tokens": ids[1:], "weights": [1.0] * tokens},
            )
        )
    return data


class Loop:
    """A training loop in a thread of its own; records when each step completed."""

    def __init__(self, tc) -> None:
        self.tc = tc
        self.done: list[float] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        step = 0
        try:
            while not self.stop.is_set():
                self.tc.forward_backward(batch(step), "cross_entropy").result()
                self.done.append(time.time())
                self.tc.optim_step(AdamParams(learning_rate=1e-3)).result()
                self.done.append(time.time())
                step += 1
        except BaseException as exc:  # reported by the caller
            self.error = exc


def recovery(stack: Stack, svc: ServiceClient, kills: int) -> list[float]:
    tc = svc.create_lora_training_client(TINY, rank=8, seed=0)
    loop = Loop(tc)
    loop.thread.start()
    pauses = []
    try:
        for i in range(kills):
            time.sleep(3)  # a few steps in
            with database(stack) as conn:
                name = holder(conn, tc.model_id)
            assert name is not None
            before = len(loop.done)
            killed_at = time.time()
            stack.signal_worker(name, signal.SIGKILL)  # kill -9
            stack.wait_worker_gone(name)
            while not [t for t in loop.done[before:] if t > killed_at]:
                if loop.error is not None:
                    raise loop.error
                time.sleep(0.05)
            pause = next(t for t in loop.done[before:] if t > killed_at) - killed_at
            pauses.append(pause)
            print(f"  kill {i + 1:2d}: worker {name:>3}, {pause:5.1f} s to the next completion")
            if i + 1 < kills:  # two workers again for the next kill
                stack.start_worker(name)
                wait_registered(stack, name)
    finally:
        loop.stop.set()
        loop.thread.join(60)
    if loop.error is not None:
        raise loop.error
    return pauses


def throughput(stack: Stack, svc: ServiceClient, steps: int, block: int = 5) -> tuple[float, float]:
    """Steps per second of a model on the worker with snapshots and of one on the worker
    without, in alternating blocks (placement puts the second model on the emptier worker)."""
    clients = {}
    for _ in WORKERS:
        tc = svc.create_lora_training_client(TINY, rank=8, seed=0)
        with database(stack) as conn:
            clients[holder(conn, tc.model_id)] = tc
    assert set(clients) == set(WORKERS), clients
    seconds = dict.fromkeys(WORKERS, 0.0)
    done = dict.fromkeys(WORKERS, 0)
    while min(done.values()) < steps:
        for name in WORKERS:
            tc = clients[name]
            start = time.perf_counter()
            for _ in range(block):
                tc.forward_backward(batch(done[name]), "cross_entropy")
                tc.optim_step(AdamParams(learning_rate=1e-3)).result()
                done[name] += 1
            seconds[name] += time.perf_counter() - start
    return done["on"] / seconds["on"], done["off"] / seconds["off"]


def started(workers: dict[str, list[str]], env: dict[str, str]) -> Stack:
    stack = Stack("postgres-redis", Path(tempfile.mkdtemp(prefix="lw-failover-")), workers, env=env)
    stack.start()
    for name in workers:
        wait_registered(stack, name)
    return stack


def client(stack: Stack) -> ServiceClient:
    return ServiceClient(
        base_url=stack.url, api_key=stack.keys["alice"], role_arn=stack.roles["alice"]
    )


def print_recovery(pauses: list[float]) -> None:
    p50 = statistics.median(pauses)
    print(f"{'p50':>10} {p50:6.1f} s\n{'max':>10} {max(pauses):6.1f} s   target < 30 s")


def print_throughput(on: float, off_rate: float) -> None:
    print(f"{'snapshots':>10} {'steps/s':>8}")
    print(f"{'on':>10} {on:8.2f}\n{'off':>10} {off_rate:8.2f}")
    print(f"{'ratio':>10} {on / off_rate:8.3f}   target >= 0.95")


OFF = ["--snapshot-every-steps", "0", "--snapshot-every-seconds", "0"]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kills", type=int, default=10)
    p.add_argument("--steps", type=int, default=300, help="optimizer steps per side")
    p.add_argument(
        "--skip",
        action="append",
        default=[],
        choices=["recovery", "throughput", "chaos"],
        help="leave this part out (may be repeated)",
    )
    p.add_argument("--lease", type=float, help="the workers' lease in seconds (default: 10)")
    args = parse_with_quick(p, argv, {"kills": 1, "steps": 5, "lease": 5.0})
    env = {"LOOPWRIGHT_WORKER_LEASE_SECONDS": str(args.lease)} if args.lease else {}
    lease = f"{args.lease:g} s" if args.lease else "default (10 s)"
    if args.quick:
        # one stack for both parts; throughput first, so that each worker holds one model
        if {"recovery", "throughput"} - set(args.skip):
            print(f"\nquick: {args.steps} steps a side, then {args.kills} kill(s), lease {lease}")
            stack = started({"on": [], "off": OFF}, env)
            try:
                with client(stack) as svc:
                    on, off_rate = throughput(stack, svc, args.steps)
                    pauses = recovery(stack, svc, args.kills)
            finally:
                stack.stop()
            print_throughput(on, off_rate)
            print_recovery(pauses)
        return  # the chaos part's quick preset: python -m bench.chaos_pause --quick
    if "recovery" not in args.skip:
        print(f"\nrecovery: {args.kills} kills, lease {lease}, snapshots every 20 steps")
        stack = started({"a": [], "b": []}, env)
        try:
            with client(stack) as svc:
                pauses = recovery(stack, svc, args.kills)
        finally:
            stack.stop()
        print_recovery(pauses)
    if "throughput" not in args.skip:
        print(f"\nthroughput: {args.steps} steps a side, tiny model, 4 × 64 tokens a step")
        stack = started({"on": [], "off": OFF}, env)
        try:
            with client(stack) as svc:
                on, off_rate = throughput(stack, svc, args.steps)
        finally:
            stack.stop()
        print_throughput(on, off_rate)
    if "chaos" not in args.skip:
        chaos_pause.measure(replace(chaos_pause.FULL, lease=args.lease))


if __name__ == "__main__":
    main()
