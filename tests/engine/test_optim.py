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


def _one_at_a_time(params, exp_avg, exp_avg_sq, step, hp: AdamHyper, clip_coef: float) -> None:
    """The update written out for one parameter at a time (the reference for the bits)."""
    bias2_sqrt = (1 - hp.beta2**step) ** 0.5
    step_size = hp.learning_rate / (1 - hp.beta1**step)
    for name, p in params.items():
        if p.grad is None:
            continue
        grad = p.grad * clip_coef if clip_coef != 1.0 else p.grad
        m = exp_avg.setdefault(name, torch.zeros_like(p))
        v = exp_avg_sq.setdefault(name, torch.zeros_like(p))
        with torch.no_grad():
            p.mul_(1 - hp.learning_rate * hp.weight_decay)
            m.lerp_(grad, 1 - hp.beta1)
            v.mul_(hp.beta2).addcmul_(grad, grad, value=1 - hp.beta2)
            p.addcdiv_(m, (v.sqrt() / bias2_sqrt).add_(hp.eps), value=-step_size)
        p.grad = None


@pytest.mark.parametrize("clip", [0.0, 1e-3])
def test_every_parameter_updated_at_once_gives_the_bits_of_one_at_a_time(clip: float) -> None:
    """float32 parameters go through one multi-tensor call, bf16 ones one at a time; a
    parameter without a gradient is left alone; the bits are those of one at a time."""
    g = torch.Generator().manual_seed(3)
    dtypes = {f"p{i}": torch.float32 if i % 3 else torch.bfloat16 for i in range(9)}
    start = {k: torch.randn(5 + i, 4, generator=g).to(d) for i, (k, d) in enumerate(dtypes.items())}
    ours = {k: torch.nn.Parameter(t.clone()) for k, t in start.items()}
    ref = {k: torch.nn.Parameter(t.clone()) for k, t in start.items()}
    hp = AdamHyper(learning_rate=1e-2, weight_decay=0.1, grad_clip_norm=clip)
    state, ref_m, ref_v = AdamState(), {}, {}
    for step in range(1, 6):
        for i, k in enumerate(dtypes):
            if (step + i) % 4 == 0:
                continue  # no gradient this step
            grad = (torch.randn(start[k].shape, generator=g) * 1e-3).to(dtypes[k])
            ours[k].grad, ref[k].grad = grad.clone(), grad.clone()
        metrics = adamw_step(ours, state, hp)
        _one_at_a_time(ref, ref_m, ref_v, step, hp, metrics["grad_clip_coef:mean"])
        for k in dtypes:
            assert torch.equal(ours[k].detach(), ref[k].detach()), (step, k)
            assert ours[k].grad is None
    assert metrics["grad_clip_coef:mean"] < 1.0 if clip else metrics["grad_clip_coef:mean"] == 1
    for k in ref_m:
        assert torch.equal(state.exp_avg[k], ref_m[k]) and torch.equal(
            state.exp_avg_sq[k], ref_v[k]
        )
