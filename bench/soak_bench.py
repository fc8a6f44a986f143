"""Soak: sessions come and go for ``--minutes`` through a whole stack, while the resident memory
of every process (gunicorn and its workers, each worker process) is sampled; at the end each
process's memory must be flat: the median of the last quarter of the run within
``--tolerance`` (and 64 MiB) of the median of the first quarter after the warm-up.

    python -m bench.soak_bench [--minutes 20] [--sessions 6] [--steps 10] [--workers 2]

Each round runs ``--sessions`` loops at once (bench/load_bench.py: a model, steps, samples, a
state save, stop), then the next round with new sessions. Prints memory every few minutes, the
rounds' throughput, and a verdict per process; exits 1 if any grew.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

from . import stacks
from .load_bench import Tally, Target, drive, own_stack, report
from .report import parse_with_quick

MIB = 1024 * 1024


def rss(pid: int) -> int:
    """Resident bytes of one process (0 once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


class Sampler(threading.Thread):
    """Every ``every`` seconds, the resident memory of each named process of the stack."""

    def __init__(self, stack, every: float) -> None:
        super().__init__(daemon=True)
        self.stack, self.every = stack, every
        self.samples: list[tuple[float, dict[str, int]]] = []
        self.done = threading.Event()

    def processes(self) -> dict[str, int]:
        procs = {"gunicorn master": self.stack.http_proc.pid}
        for i, child in enumerate(sorted(children(self.stack.http_proc.pid))):
            procs[f"gunicorn worker {i}"] = child
        for name, proc in self.stack.worker_procs.items():
            procs[f"worker {name}"] = proc.pid
        return procs

    def run(self) -> None:
        started = time.monotonic()
        while not self.done.is_set():
            at = time.monotonic() - started
            self.samples.append((at, {n: rss(pid) for n, pid in self.processes().items()}))
            self.done.wait(self.every)


def verdict(samples, warmup: float, tolerance: float) -> tuple[bool, list[str]]:
    """Per process: first quarter after the warm-up vs the last quarter (medians)."""
    kept = [(t, m) for t, m in samples if t >= warmup]
    if len(kept) < 8:
        raise SystemExit("too few samples after the warm-up: run longer")
    quarter = len(kept) // 4
    early, late = kept[:quarter], kept[-quarter:]
    ok, lines = True, []
    lines.append(
        f"{'process':<22}{'early MiB':>10}{'late MiB':>10}{'max MiB':>10}{'growth':>9}  flat"
    )
    for name in kept[0][1]:
        a = statistics.median(m.get(name, 0) for _, m in early) / MIB
        b = statistics.median(m.get(name, 0) for _, m in late) / MIB
        peak = max(m.get(name, 0) for _, m in kept) / MIB
        flat = b - a <= max(tolerance * a, 64)
        ok &= flat
        lines.append(
            f"{name:<22}{a:10.0f}{b:10.0f}{peak:10.0f}{(b - a) / a if a else 0:9.1%}  "
            f"{'yes' if flat else 'NO'}"
        )
    return ok, lines


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=20)
    p.add_argument("--sessions", type=int, default=6)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--every", type=float, default=15, help="seconds between memory samples")
    p.add_argument("--warmup", type=float, default=180, help="seconds before memory is judged")
    p.add_argument("--tolerance", type=float, default=0.10)
    quick = {"minutes": 0.25, "sessions": 2, "steps": 2, "workers": 1, "every": 1, "warmup": 8}
    args = parse_with_quick(p, argv, quick)
    stack = stacks.start(own_stack(args.workers))
    sampler = Sampler(stack, args.every)
    sampler.start()
    total, rounds, sessions, seconds_in_rounds = Tally(), 0, 0, 0.0
    deadline = time.monotonic() + args.minutes * 60
    last_print = 0.0
    try:
        target = Target(stack.url, stack.keys["alice"], stack.roles["alice"])
        while time.monotonic() < deadline:
            tally, seconds = drive(target, args.sessions, args.steps, first=sessions)
            rounds, sessions, seconds_in_rounds = (
                rounds + 1,
                sessions + args.sessions,
                seconds_in_rounds + seconds,
            )
            for kind, ms in tally.latencies.items():
                total.latencies[kind] += ms
            for kind, errors in tally.errors.items():
                total.errors[kind] += errors
            if sampler.samples and sampler.samples[-1][0] - last_print >= 120:
                at, mem = sampler.samples[-1]
                last_print = at
                shown = ", ".join(f"{n} {v / MIB:.0f}" for n, v in mem.items())
                print(f"{at / 60:5.1f} min, {sessions} sessions: RSS MiB {shown}", flush=True)
    finally:
        sampler.done.set()
        sampler.join()
        stacks.stop(stack)
    print(f"\nsoak: {args.minutes:g} min, {rounds} rounds, {sessions} sessions "
          f"({args.sessions} at once × {args.steps} steps), {args.workers} CPU workers")  # fmt: skip
    print(report(total, seconds_in_rounds))
    ok, lines = verdict(sampler.samples, args.warmup, args.tolerance)
    print(f"\nresident memory, warm-up {args.warmup:g} s, tolerance {args.tolerance:.0%} or 64 MiB")
    print("\n".join(lines))
    if args.quick:  # seconds of a run say nothing of growth: shown, not judged
        print("quick: the verdict above is not judged")
        sys.exit(0)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
