"""Sampling controls benchmark: 8 sessions in one engine call, each with other logits processors
(or a grammar), against the same 8 sessions' work without any, in process on the tiny model.

Each session brings one prompt × ``--samples`` samples × ``--new-tokens`` tokens (no stop, so
every row runs to the end). The first row's sessions use min_p, repetition, presence and
frequency penalties and logit biases in different mixes; the second row's also include two
sessions whose answers follow a regular expression and a JSON schema. Ratios are generated
tokens/s with the controls over tokens/s without, from one run (the sides alternate; medians).
The note says how many model passes each side took: requests with different controls share one
pass, so the counts are equal. Nothing asserts on speed; the target column says what we aim for.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import torch

from loopwright.structured_output import Structure
from workers.engine.host import ModelHost
from workers.engine.logits_processors import Controls
from workers.engine.sampler import SampleJob

from .batching_bench import tiny_host
from .report import Row, format_table

SESSIONS = 8
MIXED = [
    Controls(min_p=0.05),
    Controls(repetition_penalty=1.3),
    Controls(presence_penalty=0.6, frequency_penalty=0.4),
    Controls(logit_bias=tuple((t, 2.0 - t / 32) for t in range(0, 256, 4))),
    Controls(min_p=0.02, repetition_penalty=1.1, frequency_penalty=0.3),
    Controls(logit_bias=((10, -100.0), (13, -100.0), (32, 1.5))),
    Controls(presence_penalty=-0.5, min_p=0.1),
    Controls(repetition_penalty=0.9, logit_bias=((101, 3.0),)),
]
SCHEMA = (
    '{"type":"object","properties":{"words":{"type":"array","items":'
    '{"type":"string","pattern":"^[a-z]{1,12}$"}}},"required":["words"]}'
)
STRUCTURED = [
    *MIXED[:6],
    Controls(structure=Structure("regex", "([a-z]{1,8} )+"), min_p=0.02),
    Controls(structure=Structure("json_schema", SCHEMA), repetition_penalty=1.1),
]


def jobs(a: argparse.Namespace, vocab: int, controls: list[Controls] | None) -> list[SampleJob]:
    rng = np.random.default_rng(a.seed)
    out = []
    for i in range(SESSIONS):
        job = SampleJob(
            prompt=rng.integers(0, min(vocab, 256), size=int(rng.integers(16, 49))).tolist(),
            num_samples=a.samples,
            max_tokens=a.new_tokens,
            temperature=1.0,
            stop_tokens=[],  # every row runs to max_tokens (a grammar may end one earlier)
            seed=a.seed + i,
        )
        out.append(job if controls is None else replace(job, controls=controls[i]))
    return out


class Passes:
    """Counts the model's forward passes."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.count = 0
        model.register_forward_hook(lambda *_: self._add())

    def _add(self) -> None:
        self.count += 1


def timed(fn: Callable[[], int], passes: Passes) -> tuple[float, int, int]:
    """Seconds, tokens generated and model passes of one call."""
    before = passes.count
    start = time.perf_counter()
    tokens = fn()
    return time.perf_counter() - start, tokens, passes.count - before


def compare(a, host: ModelHost, ids: list[str], name: str, controls: list[Controls]) -> Row:
    plain_jobs = jobs(a, host.vocab_size, None)
    ours_jobs = jobs(a, host.vocab_size, controls)
    passes = Passes(host.sampler.model)

    def run(js: list[SampleJob]) -> Callable[[], int]:
        def call() -> int:
            results = host.sample_many([(ids[i], [js[i]]) for i in range(SESSIONS)])
            return sum(r[0].sampled_tokens for r in results if not isinstance(r, Exception))

        return call

    run(plain_jobs)()  # warm-up: both sides, once
    run(ours_jobs)()
    plain, ours = [], []
    for _ in range(a.reps):  # alternate, so that a change in load hits both sides alike
        plain.append(timed(run(plain_jobs), passes))
        ours.append(timed(run(ours_jobs), passes))
    rate_plain = statistics.median(tok / t for t, tok, _ in plain)
    rate_ours = statistics.median(tok / t for t, tok, _ in ours)
    return Row(
        f"sample, {SESSIONS} sessions, {name} (tokens/s)",
        rate_ours,
        rate_plain,
        ">=",
        0.9,
        f"{a.samples} samples x {a.new_tokens} tokens per session; model passes per call "
        f"{ours[0][2]} vs {plain[0][2]} without; reference: the same work, no controls",
    )


def main(argv: list[str] | None = None) -> list[Row]:
    p = argparse.ArgumentParser(prog="python -m bench.sampling_controls_bench", description=__doc__)
    p.add_argument("--quick", action="store_true", help="3 repetitions of 16 new tokens")
    p.add_argument("--reps", type=int, help="timed repetitions per side (default 5, quick 3)")
    p.add_argument("--samples", type=int, default=4, help="samples per session's prompt")
    p.add_argument("--new-tokens", type=int, help="tokens per sample (default 64, quick 16)")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    a.reps = a.reps or (3 if a.quick else 5)
    a.new_tokens = a.new_tokens or (16 if a.quick else 64)
    with tiny_host(a.threads, a.reps, SESSIONS) as (host, ids):
        rows = [
            compare(a, host, ids, "mixed processors", MIXED),
            compare(a, host, ids, "mixed processors and grammars", STRUCTURED),
        ]
    print(format_table(rows))
    return rows


if __name__ == "__main__":
    main()
