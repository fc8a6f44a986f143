"""Each logits processor against the independent reference, on random logits, exactly: many rows
of different controls in one pass, each as the reference computes it alone."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
import torch

from loopwright.types import SamplingParams
from workers.engine.constrained import Grammars
from workers.engine.errors import InvalidInput
from workers.engine.logits_processors import Controls, Processors

from .processors_reference import Asked, processed

V = 50


@dataclass
class FakeRow:
    job: int
    sample: int = 0
    tokens: list[int] = field(default_factory=list)
    stop_reason: str | None = None


def controls_of(a: Asked) -> Controls:
    return Controls.of(
        SamplingParams(
            min_p=a.min_p,
            repetition_penalty=a.repetition_penalty,
            presence_penalty=a.presence_penalty,
            frequency_penalty=a.frequency_penalty,
            logit_bias=a.logit_bias,
        )
    )


ASKED = [
    Asked(),  # nothing: the row must come out untouched
    Asked(repetition_penalty=1.7),
    Asked(repetition_penalty=0.6),
    Asked(frequency_penalty=0.9),
    Asked(presence_penalty=-1.3),
    Asked(frequency_penalty=-0.4, presence_penalty=1.1, repetition_penalty=1.2),
    Asked(logit_bias={3: 5.5, 7: -2.25, 11: -100}),
    Asked(logit_bias={4: 100, 9: 100, 12: -3.0}),
    Asked(repetition_penalty=1.4, frequency_penalty=2.0, logit_bias={0: 1.5, 1: -100}),
]


def run_steps(asked: list[Asked], steps: int, seed: int):
    """Draw ``steps`` tokens per row through ``Processors`` (tokens chosen by the test), checking
    every step's processed logits against the reference."""
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(0, V, size=int(rng.integers(1, 9))).tolist() for _ in asked]
    procs = Processors(
        [controls_of(a) for a in asked], prompts, V, torch.device("cpu"), Grammars(None, V)
    )
    rows = [FakeRow(job=j) for j in range(len(asked))]
    for _ in range(steps):
        logits = torch.from_numpy(rng.normal(0, 3, size=(len(rows), V)).astype(np.float32))
        got = procs.before_temperature(logits, rows)
        for i, row in enumerate(rows):
            want = processed(logits[i].numpy(), prompts[row.job], row.tokens, asked[row.job])
            np.testing.assert_array_equal(got[i].numpy(), want)
        # repeated tokens, so that counts above 1 matter
        tokens = [
            int(rng.choice(row.tokens))
            if row.tokens and rng.random() < 0.5
            else int(rng.integers(V))
            for row in rows
        ]
        procs.advance(rows, tokens)
        for row, token in zip(rows, tokens, strict=True):
            row.tokens.append(token)
    return procs


def test_each_processor_matches_the_reference_exactly_in_one_mixed_pass() -> None:
    run_steps(ASKED, steps=12, seed=0)


def test_rows_join_and_leave_without_disturbing_the_others() -> None:
    """Slots of stopped rows are reused by new rows, which start from their own prompt."""
    rng = np.random.default_rng(1)
    asked = [Asked(repetition_penalty=1.5, frequency_penalty=0.7)] * 6
    prompts = [rng.integers(0, V, size=4).tolist() for _ in asked]
    procs = Processors(
        [controls_of(a) for a in asked], prompts, V, torch.device("cpu"), Grammars(None, V)
    )
    live = [FakeRow(job=j) for j in range(3)]
    waiting = [FakeRow(job=j) for j in range(3, 6)]
    for step in range(10):
        logits = torch.from_numpy(rng.normal(0, 2, size=(len(live), V)).astype(np.float32))
        got = procs.before_temperature(logits, live)
        for i, row in enumerate(live):
            want = processed(logits[i].numpy(), prompts[row.job], row.tokens, asked[row.job])
            np.testing.assert_array_equal(got[i].numpy(), want)
        tokens = [int(rng.integers(V)) for _ in live]
        procs.advance(live, tokens)
        for row, token in zip(live, tokens, strict=True):
            row.tokens.append(token)
        if step in (3, 6) and waiting:
            live[0].stop_reason = "stop"
            procs.release(live)
            live = [*live[1:], waiting.pop(0)]
    assert len(procs._slots) == 3 and procs._counts_S_V.shape[0] == 8


def test_min_p_keeps_what_the_reference_keeps() -> None:
    rng = np.random.default_rng(2)
    asked = [Asked(min_p=m) for m in (0.0, 0.01, 0.1, 0.5, 1.0)]
    procs = Processors(
        [controls_of(a) for a in asked],
        [[1]] * len(asked),
        V,
        torch.device("cpu"),
        Grammars(None, V),
    )
    rows = [FakeRow(job=j) for j in range(len(asked))]
    scaled = torch.from_numpy(rng.normal(0, 2, size=(len(rows), V)).astype(np.float32))
    got = procs.after_temperature(scaled, rows)
    for i, a in enumerate(asked):
        p = np.exp(scaled[i].double().numpy() - scaled[i].double().max().item())
        p /= p.sum()
        keep = p >= a.min_p * p.max()
        assert np.array_equal(np.isfinite(got[i].numpy()), keep)
        np.testing.assert_array_equal(got[i].numpy()[keep], scaled[i].numpy()[keep])
    assert int(np.isfinite(got[4].numpy()).sum()) == 1  # min_p = 1: the likeliest alone


def test_nothing_asked_is_the_same_tensor() -> None:
    procs = Processors([Controls()] * 2, [[1], [2]], V, torch.device("cpu"), Grammars(None, V))
    logits = torch.randn(2, V)
    rows = [FakeRow(job=0), FakeRow(job=1)]
    assert procs.before_temperature(logits, rows) is logits
    assert procs.after_temperature(logits, rows) is logits


def test_bans_of_every_token_leave_the_step_unbiased() -> None:
    """If the bias bans everything, the step is drawn as if no bias were given."""
    asked = Asked(logit_bias=dict.fromkeys(range(V), -100.0))
    procs = Processors([controls_of(asked)], [[1]], V, torch.device("cpu"), Grammars(None, V))
    logits = torch.randn(1, V)
    got = procs.before_temperature(logits, [FakeRow(job=0)])
    np.testing.assert_array_equal(got.numpy(), logits.numpy())


def test_extreme_repetition_penalties_saturate_instead_of_overflowing() -> None:
    for r in (1e-300, 1e-45, 1e300):
        procs = Processors(
            [controls_of(Asked(repetition_penalty=r))],
            [list(range(V))],
            V,
            torch.device("cpu"),
            Grammars(None, V),
        )
        got = procs.before_temperature(torch.randn(1, V) * 5, [FakeRow(job=0)])
        assert torch.isfinite(got).all()


@pytest.mark.parametrize(
    ("controls", "field"),
    [
        (Controls(min_p=1.5), "sampling_params.min_p"),
        (Controls(repetition_penalty=0.0), "sampling_params.repetition_penalty"),
        (Controls(presence_penalty=2.5), "sampling_params.presence_penalty"),
        (Controls(frequency_penalty=-3.0), "sampling_params.frequency_penalty"),
        (Controls(logit_bias=((V, 1.0),)), "sampling_params.logit_bias"),
        (Controls(logit_bias=((1, 101.0),)), "sampling_params.logit_bias"),
        (Controls(logprobs_of="raw"), "sampling_params.logprobs_of"),
    ],
)
def test_out_of_range_controls_name_the_field(controls: Controls, field: str) -> None:
    with pytest.raises(InvalidInput) as err:
        controls.check(V)
    assert err.value.field == field


def test_explicit_zeros_and_ones_are_the_same_as_leaving_them_out() -> None:
    given = Controls.of(
        SamplingParams(
            min_p=0, repetition_penalty=1, presence_penalty=0, frequency_penalty=0, logit_bias={}
        )
    )
    assert given == Controls.of(SamplingParams()) == Controls()
