"""DPO and KTO losses against their formulas, written out by hand."""

from __future__ import annotations

import math

import pytest

from loopwright.cookbook.datums import sequence_datum
from loopwright.cookbook.preference_losses import dpo_loss, kto_loss, sequence_logprob

torch = pytest.importorskip("torch")


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def datum(n: int, trained: int):
    """n tokens, the last ``trained`` of them weighted."""
    return sequence_datum(list(range(n)), [0.0] * (n - trained) + [1.0] * trained)


def test_sequence_logprob_sums_trained_tokens() -> None:
    assert sequence_logprob([None, -1.0, -2.0, -3.0], [0.0, 0.0, 1.0, 1.0]) == -5.0
    with pytest.raises(ValueError):
        sequence_logprob([-1.0], [1.0, 1.0])


def test_dpo_matches_the_formula_and_pushes_chosen_up() -> None:
    data = [datum(5, 2), datum(5, 3), datum(4, 2), datum(4, 1)]
    logprobs = [
        torch.tensor(v, requires_grad=True)
        for v in ([-9, -9, -0.5, -1.0], [-9, -0.2, -0.3, -0.4], [-9, -1.5, -2.0], [-9, -9, -0.1])
    ]
    reference = [-1.0, -1.2, -3.0, -0.5]
    beta = 0.5
    loss, metrics = dpo_loss(reference, beta)(data, logprobs)
    policy = [-1.5, -0.9, -3.5, -0.1]  # masked sums of the trained positions
    margins = [
        beta * ((policy[0] - reference[0]) - (policy[1] - reference[1])),
        beta * ((policy[2] - reference[2]) - (policy[3] - reference[3])),
    ]
    expected = sum(-math.log(sigmoid(m)) for m in margins) / 2
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-6)
    assert metrics["dpo/accuracy"] == pytest.approx(sum(m > 0 for m in margins) / 2)
    assert metrics["dpo/margin"] == pytest.approx(sum(margins) / 2, rel=1e-6)
    loss.backward()
    assert float(logprobs[0].grad[-1]) < 0 < float(logprobs[1].grad[-1])  # chosen up, rejected down
    assert float(logprobs[0].grad[0]) == 0.0  # untrained positions get no gradient


def test_dpo_needs_pairs() -> None:
    with pytest.raises(ValueError, match="pairs"):
        dpo_loss([0.0], 0.1)([datum(3, 1)], [torch.zeros(2)])


def test_kto_matches_the_formula() -> None:
    data = [datum(3, 1), datum(3, 1), datum(3, 1)]
    logprobs = [torch.tensor(v, requires_grad=True) for v in ([-9, -0.5], [-9, -2.0], [-9, -1.0])]
    reference = [-1.0, -1.0, -1.5]
    labels = [True, False, True]
    beta, lam_d, lam_u = 0.2, 1.0, 1.5
    loss, metrics = kto_loss(reference, labels, beta, lam_d, lam_u)(data, logprobs)
    ratios = [-0.5 + 1.0, -2.0 + 1.0, -1.0 + 1.5]
    z0 = max(0.0, sum(ratios) / 3)
    values = [
        lam_d * (1 - sigmoid(beta * (ratios[0] - z0))),
        lam_u * (1 - sigmoid(beta * (z0 - ratios[1]))),
        lam_d * (1 - sigmoid(beta * (ratios[2] - z0))),
    ]
    assert float(loss.detach()) == pytest.approx(sum(values) / 3, rel=1e-6)
    assert metrics["kto/kl"] == pytest.approx(z0)
    loss.backward()
    assert float(logprobs[0].grad[-1]) < 0  # desirable: raised
    assert float(logprobs[1].grad[-1]) > 0  # undesirable: lowered
