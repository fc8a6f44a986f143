"""The SageMaker runtime benchmark's quick preset runs end to end against its own stack and
reports its rows (their numbers are the benchmark's to judge, not a test's)."""

from __future__ import annotations

import pytest

from bench import sagemaker_runtime_bench

pytestmark = pytest.mark.e2e


def test_the_quick_preset_reports_every_row() -> None:
    rows = sagemaker_runtime_bench.main(["--quick"])
    assert [r.metric for r in rows] == [
        "forward_backward p50 (ms): runtime vs Tinker face",
        "forward_backward p99 (ms): runtime vs Tinker face",
    ]
    assert all(r.ours > 0 and r.reference > 0 for r in rows)
