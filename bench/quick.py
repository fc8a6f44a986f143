"""Every benchmark's quick preset, one after the other: what CI runs (``make bench-quick``).

Each runs as ``python -m bench.<name> --quick`` in a process of its own: tiny sizes, seconds
each. A benchmark that fails (an exception, a non-zero exit) fails the run; speed is never
judged, the ratios are printed as the benchmark prints them (on a busy CI machine they are
noise). The benchmarks whose quick preset a test already runs are left to the test suite.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

# in the order they run: in process first, then those that start a stack of their own
BENCHMARKS = (
    "engine_bench",  # with the memory probes (bench/memory.py)
    "batching_bench",
    "distributed_bench",
    "envelope_bench",
    "wire_bench",
    "usage_report_bench",  # PostgreSQL (DATABASE_URL)
    "overhead_bench",
    "recorded_bench",
    "load_bench",
    "scheduler_bench",
    "soak_bench",
    "failover_bench",
)
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
    times: dict[str, float] = {}
    failed: list[str] = []
    began = time.monotonic()
    for name in args.names or BENCHMARKS:
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
    print(f"\nquick benchmarks: {time.monotonic() - began:.0f} s")
    for name, seconds in times.items():
        print(f"  {name:<24} {seconds:6.1f} s  {'FAILED' if name in failed else 'ok'}")
    for name, test in IN_TESTS.items():
        print(f"  {name:<24} in the tests: {test}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
