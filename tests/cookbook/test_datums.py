"""Datums, group-relative advantages and answer extraction."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from loopwright.cookbook.datums import (
    RLSegment,
    group_relative_advantages,
    rl_datum,
    rl_loss,
    sampled_segment,
    sequence_datum,
    sft_datums,
)
from loopwright.cookbook.math_tasks import (
    arithmetic_eval_set,
    arithmetic_train_problems,
    extract_answer,
    gsm_problems,
    math_reward,
    normalize_number,
)


def test_advantages_are_centred_and_scaled_within_the_group() -> None:
    rewards = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    mean = sum(rewards) / len(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
    got = group_relative_advantages(rewards)
    assert got == pytest.approx([(r - mean) / std for r in rewards])
    assert sum(got) == pytest.approx(0.0, abs=1e-9)
    assert group_relative_advantages(rewards, normalize=False) == pytest.approx(
        [r - mean for r in rewards]
    )


def test_a_group_without_spread_has_no_signal() -> None:
    assert group_relative_advantages([1.0, 1.0, 1.0]) == [0.0, 0.0, 0.0]
    assert group_relative_advantages([-0.1] * 4) == [0.0] * 4
    assert group_relative_advantages([]) == []


def test_sequence_datum_shifts_inputs_and_targets() -> None:
    datum = sequence_datum([10, 11, 12, 13], [0.0, 0.0, 1.0, 1.0])
    assert datum.model_input.to_ints() == [10, 11, 12]
    assert datum.loss_fn_inputs["target_tokens"].tolist() == [11, 12, 13]
    assert datum.loss_fn_inputs["weights"].tolist() == [0.0, 1.0, 1.0]
    with pytest.raises(ValueError):
        sequence_datum([1, 2], [1.0])


def test_sft_batch_weights_make_the_summed_loss_a_mean_per_token() -> None:
    batch = [([1, 2, 3, 4], [0.0, 0.0, 1.0, 1.0]), ([5, 6, 7], [0.0, 1.0, 1.0])]
    datums = sft_datums(batch)
    total = sum(d.loss_fn_inputs["weights"].to_numpy().sum() for d in datums)
    assert total == pytest.approx(1.0)
    assert datums[0].loss_fn_inputs["weights"].tolist() == pytest.approx([0.0, 0.25, 0.25])
    with pytest.raises(ValueError, match="no trained tokens"):
        sft_datums([([1, 2], [1.0, 0.0])])


def test_rl_datum_keeps_context_out_of_the_loss() -> None:
    prompt = RLSegment([1, 2, 3])
    answer = sampled_segment([4, 5], [-0.5, -0.25], 2.0)
    tool = RLSegment([6])
    second = sampled_segment([7, 8], [-1.0, -2.0]).with_advantage(-1.5)
    datum = rl_datum([prompt, answer, tool, second])
    assert datum.model_input.to_ints() == [1, 2, 3, 4, 5, 6, 7]
    inputs = datum.loss_fn_inputs
    assert inputs["target_tokens"].tolist() == [2, 3, 4, 5, 6, 7, 8]
    assert inputs["logprobs"].tolist() == [0.0, 0.0, -0.5, -0.25, 0.0, -1.0, -2.0]
    assert inputs["advantages"].tolist() == [0.0, 0.0, 2.0, 2.0, 0.0, -1.5, -1.5]
    assert tool.with_advantage(3.0) is tool  # context never gets an advantage


def test_per_token_advantages_and_checks() -> None:
    segment = sampled_segment([1, 2], [-0.1, -0.2], [0.5, -0.5])
    assert segment.per_token_advantages() == [0.5, -0.5]
    with pytest.raises(ValueError, match="no logprobs"):
        sampled_segment([1, 2], None)
    with pytest.raises(ValueError, match="advantages"):
        RLSegment([1, 2], [-0.1, -0.2], [1.0])
    assert rl_loss("ppo") == "ppo"
    with pytest.raises(ValueError, match="loss_fn"):
        rl_loss("cross_entropy")


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("2 + 3 = 5\n#### 5", "5"),
        ("#### 1,200", "1200"),
        ("so the total is\n####  -7.", "-7"),
        ("#### $12.50", "12.5"),
        ("#### 12.0", "12"),
        ("first #### 3 then #### 4", "4"),
        ("The answer is 5", None),
        ("#### five", None),
    ],
)
def test_extract_answer(text, answer) -> None:
    assert extract_answer(text) == answer


def test_math_reward_is_exact_answer_after_the_marker() -> None:
    assert math_reward("7 + 5 = 12\n#### 12", "12") == 1.0
    assert math_reward("#### 12.0", "12") == 1.0
    assert math_reward("12", "12") == 0.0  # no marker, no reward
    assert math_reward("#### 13", "12") == 0.0
    assert normalize_number("abc") is None


def test_held_out_arithmetic_never_appears_in_training() -> None:
    held_out = arithmetic_eval_set(64, seed=3)
    questions = {p.question for p in held_out}
    assert len(questions) == 64
    for step in range(50):
        for problem in arithmetic_train_problems(step, 8, 3, questions):
            assert problem.question not in questions
            a, _, b = problem.question.removeprefix("What is ").rstrip("?").split()
            assert int(problem.answer) == int(a) + int(b)
            assert math_reward(problem.solution, problem.answer) == 1.0
    # a function of (seed, step): a resumed run sees the same questions
    assert arithmetic_train_problems(7, 8, 3, questions) == arithmetic_train_problems(
        7, 8, 3, questions
    )


def test_gsm_problems_carry_checkable_answers() -> None:
    pytest.importorskip("reasoning_gym")
    problems = gsm_problems(8, seed=random.Random(0).randint(0, 1000))
    assert len(problems) == 8
    for problem in problems:
        assert problem.question
        assert math_reward(problem.solution, problem.answer) == 1.0  # its worked solution scores
    assert np.mean([extract_answer(p.solution) is not None for p in problems]) == 1.0


def test_sft_batches_cover_each_epoch_once() -> None:
    from loopwright.cookbook.sft import batch_indices, split

    seen = [i for step in range(5) for i in batch_indices(step, 4, 10, seed=1)]
    assert sorted(seen[:10]) == list(range(10)) and sorted(seen[10:20]) == list(range(10))
    train, held_out = split(list(range(50)), 0.1, seed=0)
    assert len(held_out) == 5 and not set(train) & set(held_out)
    assert split(list(range(50)), 0.1, seed=0) == (train, held_out)
