"""Our AdamW against torch.optim.AdamW + clip_grad_norm_ as the independent reference."""

from __future__ import annotations

import pytest
import torch

from workers.engine.optim import AdamHyper, AdamState, adamw_step


@pytest.mark.parametrize(
    "hp",
    [
        AdamHyper(learning_rate=1e-2),
        AdamHyper(learning_rate=3e-3, beta1=0.8, beta2=0.99, eps=1e-8, weight_decay=0.1),
        AdamHyper(learning_rate=1e-2, weight_decay=0.05, grad_clip_norm=0.5),
    ],
)
def test_matches_torch_adamw_with_clipping(hp: AdamHyper) -> None:
    g = torch.Generator().manual_seed(0)
    shapes = {"a": (4, 8), "b": (8,), "c": (3, 3)}
    ours = {k: torch.nn.Parameter(torch.randn(s, generator=g)) for k, s in shapes.items()}
    ref = {k: torch.nn.Parameter(p.detach().clone()) for k, p in ours.items()}
    opt = torch.optim.AdamW(
        list(ref.values()),
        lr=hp.learning_rate,
        betas=(hp.beta1, hp.beta2),
        eps=hp.eps,
        weight_decay=hp.weight_decay,
        foreach=False,
    )
    state = AdamState()
    for _ in range(5):
        grads = {k: torch.randn(s, generator=g) * 3 for k, s in shapes.items()}
        for k in shapes:
            ours[k].grad = grads[k].clone()
            ref[k].grad = grads[k].clone()
        metrics = adamw_step(ours, state, hp)
        norm = torch.nn.utils.clip_grad_norm_(list(ref.values()), hp.grad_clip_norm or float("inf"))
        opt.step()
        opt.zero_grad()
        assert metrics["grad_norm:mean"] == pytest.approx(float(norm), rel=1e-6)
        for k in shapes:
            torch.testing.assert_close(ours[k].detach(), ref[k].detach(), rtol=1e-6, atol=1e-7)
            assert ours[k].grad is None
    assert state.step == 5


def test_state_round_trips_through_tensors() -> None:
    p = {"w": torch.nn.Parameter(torch.ones(3))}
    p["w"].grad = torch.tensor([1.0, -2.0, 0.5])
    state = AdamState()
    adamw_step(p, state, AdamHyper(learning_rate=0.1))
    again = AdamState.from_tensors(state.step, state.tensors())
    assert again.step == 1
    assert torch.equal(again.exp_avg["w"], state.exp_avg["w"])
    assert torch.equal(again.exp_avg_sq["w"], state.exp_avg_sq["w"])
