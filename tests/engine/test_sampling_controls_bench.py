"""The sampling controls benchmark runs end to end with a small preset: both rows come out, and
requests with different processors (and grammars) took as many model passes as without them."""

from __future__ import annotations

import re

from bench import sampling_controls_bench


def test_the_benchmark_runs_and_controls_share_the_passes(capsys) -> None:
    rows = sampling_controls_bench.main(
        ["--quick", "--reps", "1", "--new-tokens", "4", "--samples", "1"]
    )
    assert [r.metric for r in rows] == [
        "sample, 8 sessions, mixed processors (tokens/s)",
        "sample, 8 sessions, mixed processors and grammars (tokens/s)",
    ]
    for row in rows:
        assert row.ours > 0 and row.reference > 0
        ours, plain = re.search(r"model passes per call (\d+) vs (\d+)", row.note).groups()
        assert ours == plain == "4"  # one pass per token for all 8 sessions, controls or not
    assert "mixed processors (tokens/s)" in capsys.readouterr().out
