"""Chaos: training loops of two tenants on several workers while workers and the control plane
are killed. Each loop must end as an uninterrupted run of it ends (the same adapter and AdamW
state bit for bit, the same sampled tokens) and be billed once (the same tokens per meter); the
longest pause each loop saw (between two of its consecutive completed operations) is printed
against a 15 s target, never asserted. ``bench.failover_bench`` runs it as its third part;
alone: ``python -m bench.chaos_pause [--quick] [--lease SECONDS]``.

The loop is the fault tests' seeded loop (``tests/e2e/seeded_loop.py``): forward_backward of
16 × 96 tokens, optim_step, and every fourth step a state save and a seeded sample.
"""

from __future__ import annotations

import argparse
import signal
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

import httpx
import torch

from loopwright import ServiceClient
from tests.e2e.chaos import database, holder, wait_registered
from tests.e2e.outcome import differences, state_of, usage
from tests.e2e.seeded_loop import download_final, train_step
from tests.e2e.stack import TINY, Stack

from .report import parse_with_quick

TARGET = 15.0  # seconds: the longest pause a loop may see
TENANTS = ("alice", "charlie")
SEED = 11


@dataclass(frozen=True)
class Sizes:
    """One chaos run: ``loops`` loops (split between the two tenants) of ``steps`` steps on
    ``workers`` worker processes, ``kills`` of which are killed with the control plane."""

    loops: int
    workers: int
    kills: int
    steps: int
    lease: float | None = None  # the workers' lease in seconds (None: the default, 10 s)


FULL = Sizes(loops=6, workers=3, kills=2, steps=16)
QUICK = Sizes(loops=2, workers=2, kills=1, steps=4, lease=3.0)


@dataclass
class TimedLoop:
    """The seeded loop of tenant ``who`` in a thread of its own; ``marks`` holds the wall-clock
    time of each completed operation (its model's creation first, its final save last) and the
    operation the loop sent next."""

    stack: Stack
    who: str
    steps: int
    folder: Path
    marks: list[tuple[float, str]] = field(default_factory=list)
    samples: list[list[list[int]]] = field(default_factory=list)
    model_id: str | None = None
    session_id: str | None = None
    state: dict[str, torch.Tensor] = field(default_factory=dict)
    error: BaseException | None = None
    created: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _mark(self, point: str = "", step: int = -1, **kwargs) -> None:
        # called just before each operation is sent: the one before it has completed
        self.marks.append((time.time(), f"{point} {step}" if point else "the next"))

    def _run(self) -> None:
        try:
            with client(self.stack, self.who) as svc:
                tc = svc.create_lora_training_client(TINY, rank=8, seed=SEED)
                self.model_id, self.session_id = tc.model_id, tc.session_id
                self.created.set()
                for step in range(self.steps):
                    _, sampled = train_step(tc, step, self._mark)
                    self._mark("after step", step)
                    if sampled is not None:
                        self.samples.append(sampled)
                folder = download_final(svc, tc, self.folder)
                self._mark("done")
                tc.stop()
            self.state = state_of(folder)
        except BaseException as exc:  # reported by the caller
            self.error = exc
        finally:
            self.created.set()

    @property
    def steps_done(self) -> int:
        return len(self.marks) // 3  # at least three marks a step

    def pause(self) -> tuple[float, float, str]:
        """The longest time between two consecutive completions, when it ended, and what the
        loop waited on meanwhile (the point it was at: the operations sent after it)."""
        gaps = [
            (b - a, b, what) for (a, what), (b, _) in zip(self.marks, self.marks[1:], strict=False)
        ]
        return max(gaps, default=(0.0, 0.0, ""))


def client(stack: Stack, who: str) -> ServiceClient:
    return ServiceClient(base_url=stack.url, api_key=stack.keys[who], role_arn=stack.roles[who])


def recoveries(stack: Stack, who: str, session_id: str) -> list[dict]:
    r = httpx.get(
        f"{stack.url}/api/v1/sessions/{session_id}",
        headers={"X-API-Key": stack.keys[who]},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    return r.json()["recoveries"]


def started(sizes: Sizes) -> Stack:
    env = {"LOOPWRIGHT_WORKER_LEASE_SECONDS": f"{sizes.lease:g}"} if sizes.lease else {}
    workers = {f"c{i + 1}": [] for i in range(sizes.workers)}
    folder = Path(tempfile.mkdtemp(prefix="lw-chaos-"))
    stack = Stack("postgres-redis", folder, workers, env=env).start()
    for name in workers:
        wait_registered(stack, name)
    return stack


@dataclass
class Outcome:
    """What the run measured and found: per loop, its longest pause and whether it ended exact
    and billed once."""

    killed: list[str]
    killed_at: float
    answering_after: float  # seconds from the kill until the control plane answered again
    loops: list[TimedLoop]
    exact: list[bool]
    billed_once: list[bool]
    moved: list[list[dict]]
    waited: list[list[str]]  # per loop: the operations of its longest pause (``waited_on``)

    @property
    def longest(self) -> float:
        return max(loop.pause()[0] for loop in self.loops)


def run(sizes: Sizes, *, http_down: float = 1.0) -> Outcome:
    """One chaos run on a stack of its own: the reference loop alone, then ``sizes.loops``
    loops at once; once each has completed two steps, ``sizes.kills`` workers holding their
    models and the control plane are killed with SIGKILL, the control plane started again
    ``http_down`` seconds later."""
    stack = started(sizes)
    try:
        scratch = Path(tempfile.mkdtemp(prefix="lw-chaos-out-"))
        reference = TimedLoop(stack, "alice", sizes.steps, scratch / "reference")
        reference.thread.start()
        reference.thread.join()
        if reference.error is not None:
            raise reference.error
        ref_usage = usage(stack, reference.session_id, "alice")
        loops = [
            TimedLoop(stack, TENANTS[i % 2], sizes.steps, scratch / f"loop{i}")
            for i in range(sizes.loops)
        ]
        for loop in loops:
            loop.thread.start()
        deadline = time.monotonic() + 300
        while min(loop.steps_done for loop in loops) < 2:
            if any(loop.error for loop in loops) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        killed, killed_at = _kill(stack, loops, sizes.kills, http_down)
        back = answering(stack) - killed_at
        for loop in loops:
            loop.thread.join(600)
        failed = [loop.error for loop in loops if loop.error is not None]
        if failed:
            raise RuntimeError(f"{len(failed)} loop(s) failed: {failed[0]!r}\n{stack.logs()}")
        exact = [
            not differences(loop.state, reference.state) and loop.samples == reference.samples
            for loop in loops
        ]
        billed = [usage(stack, loop.session_id, loop.who) == ref_usage for loop in loops]
        moved = [recoveries(stack, loop.who, loop.session_id) for loop in loops]
        waited = [waited_on(stack, loop) for loop in loops]
    finally:
        stack.stop()
    return Outcome(killed, killed_at, back, loops, exact, billed, moved, waited)


def waited_on(stack: Stack, loop: TimedLoop) -> list[str]:
    """The operations of ``loop``'s model sent during its longest pause: how long each waited
    to be claimed (created to started) and ran (started to finished), and where."""
    gap, ended, _ = loop.pause()
    with database(stack) as conn:
        rows = conn.execute(
            "SELECT o.seq_id, o.kind, o.status, extract(epoch FROM o.created_at), "
            "extract(epoch FROM o.started_at), extract(epoch FROM o.finished_at), w.name "
            "FROM training_sessions_operation o LEFT JOIN fleet_worker w ON w.id = o.worker_id "
            "WHERE o.model_id = %s AND o.created_at <= to_timestamp(%s) "
            "AND (o.finished_at IS NULL OR o.finished_at >= to_timestamp(%s)) ORDER BY o.seq_id",
            [loop.model_id, ended, ended - gap],
        ).fetchall()
    return [
        f"seq {seq} {kind} ({status}, on {worker}): claimed after "
        f"{float(started or created) - float(created):.1f} s, ran {_span(started, finished)}"
        for seq, kind, status, created, started, finished, worker in rows
    ]


def _span(started, finished) -> str:
    if started is None or finished is None:
        return "?"
    return f"{float(finished) - float(started):.1f} s"


def _kill(
    stack: Stack, loops: list[TimedLoop], kills: int, http_down: float
) -> tuple[list[str], float]:
    """kill -9 of the ``kills`` workers holding most of the loops' models, then of the control
    plane, which starts again ``http_down`` seconds later. The names and when it began."""
    with database(stack) as conn:
        holders = [holder(conn, loop.model_id) for loop in loops if loop.model_id]
    names = sorted(stack.workers, key=lambda name: -holders.count(name))[:kills]
    killed_at = time.time()
    for name in names:
        stack.signal_worker(name, signal.SIGKILL)
    stack.kill_http()
    for name in names:
        stack.wait_worker_gone(name)
    time.sleep(http_down)
    stack.start_http()
    return names, killed_at


def answering(stack: Stack, timeout: float = 120) -> float:
    """When the control plane answers again (wall clock)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{stack.url}/api/v1/healthz", timeout=2).status_code < 500:
                return time.time()
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    return float("nan")


def report(sizes: Sizes, outcome: Outcome) -> None:
    lease = f"{sizes.lease:g} s" if sizes.lease else "default (10 s)"
    print(
        f"\nchaos: {sizes.loops} loops of {len(TENANTS)} tenants × {sizes.steps} steps on "
        f"{sizes.workers} workers, lease {lease}; kill -9 of worker(s) "
        f"{', '.join(outcome.killed)} and of the control plane (started again after 1 s)"
    )
    print(f"  the control plane answered again {outcome.answering_after:.1f} s after the kill")
    print(
        f"  {'loop':>4} {'tenant':>8} {'pause':>8} {'ended':>10} {'moved':>6}  exact  billed once"
    )
    for i, loop in enumerate(outcome.loops):
        gap, ended, what = loop.pause()
        moved = outcome.moved[i]
        print(
            f"  {i + 1:>4} {loop.who:>8} {gap:6.1f} s {ended - outcome.killed_at:+8.1f} s "
            f"{len(moved):>6}  {'yes' if outcome.exact[i] else 'NO':>5}  "
            f"{'yes' if outcome.billed_once[i] else 'NO':>11}   waiting at: {what}"
        )
    longest = outcome.longest
    verdict = "met" if longest < TARGET else "NOT met"
    print(
        f"  longest pause {longest:.1f} s   target < {TARGET:g} s   "
        f"ratio {longest / TARGET:.2f} ({verdict})"
    )
    for i, waited in enumerate(outcome.waited):
        for line in waited:
            print(f"  loop {i + 1}, its longest pause: {line}")
    for i, moved in enumerate(outcome.moved):
        for r in moved:
            declared = _seconds_after(r.get("declared_at"), outcome.killed_at)
            restored = _seconds_after(r.get("restored_at"), outcome.killed_at)
            print(
                f"  loop {i + 1}: {r['cause']} of {r['from_worker']}, declared by "
                f"{r['declared_by']} at {declared}, {r['outcome']} on {r['to_worker']} at "
                f"{restored} ({r['operations_replayed']} replayed)"
            )


def _seconds_after(stamp: str | None, t0: float) -> str:
    if not stamp:
        return "?"
    return f"{datetime.fromisoformat(stamp.replace('Z', '+00:00')).timestamp() - t0:+.1f} s"


def check(outcome: Outcome) -> None:
    """Every loop ended exact and was billed once; otherwise the benchmark fails."""
    wrong = [
        i + 1
        for i, (exact, billed) in enumerate(zip(outcome.exact, outcome.billed_once, strict=True))
        if not (exact and billed)
    ]
    if wrong:
        raise SystemExit(f"chaos: loop(s) {wrong} did not end exact and billed once")


def measure(sizes: Sizes) -> None:
    """One run, printed; fails (``SystemExit``) unless every loop ended exact and billed once."""
    outcome = run(sizes)
    report(sizes, outcome)
    check(outcome)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lease", type=float, help="the workers' lease in seconds (default: 10)")
    args = parse_with_quick(p, argv, {})
    sizes = QUICK if args.quick else FULL
    measure(replace(sizes, lease=args.lease) if args.lease else sizes)


if __name__ == "__main__":
    main()
