"""The SigV4 benchmark's quick preset runs end to end and reports its three rows (their
numbers are the benchmark's to judge, not a test's)."""

from __future__ import annotations

import pytest

from bench import sigv4_bench

pytestmark = pytest.mark.django_db


def test_the_quick_preset_reports_every_row() -> None:
    rows = sigv4_bench.run(requests=20)
    assert [r.metric for r in rows] == [
        "SigV4 verify p50 (ms) vs the budget",
        "SigV4 verify vs botocore signing (ms)",
        "SigV4 verify vs API key auth (ms)",
    ]
    assert all(r.ours > 0 and r.reference > 0 for r in rows)
