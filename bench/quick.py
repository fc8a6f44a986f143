"""Every benchmark's quick preset, one after the other: what CI runs (``make bench-quick``).

Each runs with ``--quick``: tiny sizes, seconds each; those that need a stack of no particular
shape share one (``bench/stacks.py``) and run in this process, the others in processes of their
own. A benchmark that fails (an exception, a non-zero exit) fails the run; speed is never
judged, the ratios are printed as the benchmark prints them (on a busy CI machine they are
noise). The benchmarks whose quick preset a test already runs are left to the test suite.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import subprocess
import sys
import time
import traceback

from . import stacks

# each in a process of its own, in this order
ALONE = (
    "engine_bench",  # with the memory probes (bench/memory.py)
    "batching_bench",
    "distributed_bench",
    "envelope_bench",
    "wire_bench",
    "usage_report_bench",  # PostgreSQL (DATABASE_URL)
    "failover_bench",  # kills workers: a stack of its own (its chaos part: the next)
    "chaos_pause",  # kills workers and the control plane: a stack of its own
    "op_cost",  # PostgreSQL and Redis servers of its own (pg_stat_statements)
)
# then these in this process, on one stack they share (bench/stacks.py)
ON_ONE_STACK = ("overhead_bench", "recorded_bench", "load_bench", "scheduler_bench", "soak_bench")
BENCHMARKS = ALONE + ON_ONE_STACK
# benchmark -> the test that runs its quick preset in the test suite
IN_TESTS = {
    "sampling_controls_bench": "tests/engine/test_sampling_controls_bench.py",
    "sigv4_bench": "tests/aws/test_sigv4_bench.py",
    "gpu_bench": "tests/engine/test_gpu_bench.py (--preset smoke)",
    "sagemaker_runtime_bench": "tests/e2e/test_sagemaker_runtime_bench.py",
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.quick", description=__doc__)
    p.add_argument("names", nargs="*", help="only these (default: all)")
    p.add_argument("--timeout", type=float, default=300, help="seconds one benchmark may take")
    args = p.parse_args(argv)
    unknown = set(args.names) - set(BENCHMARKS)
    if unknown:
        p.error(f"not a benchmark here: {sorted(unknown)}; one of {list(BENCHMARKS)}")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    os.environ["HF_HUB_OFFLINE"] = "1"
    times: dict[str, float] = {}
    failed: list[str] = []
    began = time.monotonic()
    chosen = args.names or BENCHMARKS
    for name in [n for n in ALONE if n in chosen]:
        print(f"\n=== python -m bench.{name} --quick", flush=True)
        start = time.monotonic()
        try:
            done = subprocess.run(
                [sys.executable, "-m", f"bench.{name}", "--quick"],
                env=env,
                timeout=args.timeout,
                check=False,
            )
            ok = done.returncode == 0
        except subprocess.TimeoutExpired:
            print(f"bench.{name}: still running after {args.timeout:g} s", flush=True)
            ok = False
        times[name] = time.monotonic() - start
        if not ok:
            failed.append(name)
    together = [n for n in ON_ONE_STACK if n in chosen]
    if together:
        print(f"\n=== one stack for {', '.join(together)}", flush=True)
        start = time.monotonic()
        with stacks.shared():
            times["(the shared stack's start)"] = time.monotonic() - start
            for name in together:
                print(f"\n=== bench.{name} --quick, on the shared stack", flush=True)
                start = time.monotonic()
                if not _in_process(name, args.timeout):
                    failed.append(name)
                times[name] = time.monotonic() - start
    print(f"\nquick benchmarks: {time.monotonic() - began:.0f} s")
    for name, seconds in times.items():
        print(f"  {name:<24} {seconds:6.1f} s  {'FAILED' if name in failed else 'ok'}")
    for name, test in IN_TESTS.items():
        print(f"  {name:<24} in the tests: {test}")
    return 1 if failed else 0


class _Overdue(Exception):
    pass


def _in_process(name: str, timeout: float) -> bool:
    """Run ``bench.<name>``'s main with ``--quick`` here; whether it ended well."""

    def overdue(signum, frame) -> None:
        raise _Overdue(f"bench.{name}: still running after {timeout:g} s")

    previous = signal.signal(signal.SIGALRM, overdue)
    signal.alarm(int(timeout))
    try:
        importlib.import_module(f"bench.{name}").main(["--quick"])
        return True
    except SystemExit as exc:
        return exc.code in (0, None)
    except Exception:
        traceback.print_exc()
        return False
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
