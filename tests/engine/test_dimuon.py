"""Dimuon: one and two steps against a float64 reference of the update written out here, its
effect on a fixed batch and on the advantage-weighted logprob, and its state saved, restored,
spilled and packed with AdamW models bit for bit."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from torch.optim._muon import _zeropower_via_newtonschulz

from loopwright.types import AdamParams, Datum, DimuonParams, ForwardBackwardInput
from workers.engine.adapters import AdapterConfig
from workers.engine.dimuon import orthogonalised

from .reference import randomize_adapter
from .test_adapters import assert_bit_equal, batch, optimizer_snapshot, snapshot

# Keller Jordan's Muon (github.com/KellerJordan/Muon, muon.py): the quintic's coefficients
A, B, C = 3.4445, -4.7750, 2.0315
DIMUON = AdapterConfig(rank=4, alpha=8, seed=3, optimizer="dimuon")


def reference_step(weights, grads, momentum, lr, clip, beta, rank):
    """One Dimuon step in float64 as docs/tinker-protocol.md writes it; returns new weights."""
    norm = math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads.values()))
    coef = clip / (norm + 1e-6) if clip > 0 and norm > clip else 1.0
    out = {}
    for name, w in weights.items():
        g = grads[name].double() * coef
        m = momentum.get(name, torch.zeros_like(g))
        m = beta * m + (1 - beta) * g
        momentum[name] = m
        u = (1 - beta) * g + beta * m
        x = u.T if u.shape[0] > u.shape[1] else u
        x = x / max(float(torch.linalg.matrix_norm(x)), 1e-7)
        for _ in range(5):
            gram = x @ x.T
            x = A * x + (B * gram + C * gram @ gram) @ x
        o = x.T if u.shape[0] > u.shape[1] else x
        frob = float(torch.linalg.matrix_norm(o))
        out[name] = w.double() - (lr * math.sqrt(rank) / frob * o if frob > 0 else 0 * o)
    return out


def grads_of(host, model_id):
    return {k: p.grad.clone() for k, p in host.pool.parameters(model_id).items()}


@pytest.mark.parametrize(
    "steps",
    [
        [DimuonParams(learning_rate=0.01)],
        # clipped, then a second step that carries the momentum
        [
            DimuonParams(learning_rate=0.02, grad_clip_norm=0.5, beta1=0.8),
            DimuonParams(learning_rate=0.005, grad_clip_norm=-1.0, beta1=0.95),
        ],
    ],
)
def test_steps_match_the_reference_update(host, steps) -> None:
    host.create_adapter("m", DIMUON)
    randomize_adapter(host, "m", seed=4)  # lora_B non-zero: every matrix has a gradient
    weights = {k: v.double() for k, v in snapshot(host, "m").items()}
    momentum: dict = {}
    for i, step in enumerate(steps):
        host.forward_backward("m", batch(i))
        grads = grads_of(host, "m")
        out = host.optim_step("m", step)
        weights = reference_step(
            weights, grads, momentum, step.learning_rate, step.grad_clip_norm, step.beta1, 4
        )
        ours = snapshot(host, "m")
        for name, w in weights.items():
            torch.testing.assert_close(ours[name].double(), w, rtol=1e-5, atol=1e-6)
        norm = math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads.values()))
        assert out.metrics["grad_norm:mean"] == pytest.approx(norm, rel=1e-5)
        assert out.metrics["step:max"] == i + 1
    state = host.pool.optimizer("m")
    assert not state.exp_avg_sq  # Dimuon keeps the momentum alone
    for name, m in momentum.items():
        torch.testing.assert_close(state.exp_avg[name].double(), m, rtol=1e-5, atol=1e-7)


def test_each_matrix_moves_by_learning_rate_times_sqrt_rank_along_an_orthogonal_direction(
    make_host,
) -> None:
    for rank in (2, 8):
        host = make_host()
        host.create_adapter("m", AdapterConfig(rank=rank, seed=1, optimizer="dimuon"))
        randomize_adapter(host, "m", seed=2)
        before = snapshot(host, "m")
        host.forward_backward("m", batch(5))
        host.optim_step("m", DimuonParams(learning_rate=0.01, beta1=0.0))
        for name, w in snapshot(host, "m").items():
            step = (before[name] - w).double()
            assert float(torch.linalg.matrix_norm(step)) == pytest.approx(
                0.01 * math.sqrt(rank), rel=1e-5
            )
            # the rank singular values of an orthogonalised direction are all alike
            sv = torch.linalg.svdvals(step)[:rank]
            assert float(sv.max() / sv.min()) < 2.0, name


def test_the_iteration_is_torch_muons(host) -> None:
    """Ours runs in float32, torch.optim.Muon's in bfloat16: the same map within bf16 rounding."""
    g = torch.Generator().manual_seed(0)
    for shape in ((4, 64), (96, 4), (8, 8)):
        u = torch.randn(shape, generator=g)
        theirs = _zeropower_via_newtonschulz(u, (A, B, C), 5, 1e-7).float()
        torch.testing.assert_close(orthogonalised(u), theirs, rtol=0.05, atol=0.02)


def test_a_fixed_batch_loss_falls(host) -> None:
    host.create_adapter("m", DIMUON)
    fixed = batch(7)
    losses = []
    for _ in range(6):
        losses.append(host.forward_backward("m", fixed).metrics["loss:sum"])
        host.optim_step("m", DimuonParams(learning_rate=0.02))
    losses.append(host.forward("m", fixed).metrics["loss:sum"])
    assert all(b < a for a, b in itertools.pairwise(losses)), losses
    assert losses[-1] < 0.9 * losses[0]


def train(host, model_id: str, steps: range) -> None:
    for step in steps:
        host.forward_backward(model_id, batch(step))
        host.optim_step(model_id, DimuonParams(learning_rate=0.01, grad_clip_norm=1.0))


def test_save_then_load_continues_bit_exactly(make_host, tmp_path) -> None:
    straight = make_host()
    straight.create_adapter("m", DIMUON)
    train(straight, "m", range(5))
    first = make_host()
    first.create_adapter("m", DIMUON)
    train(first, "m", range(3))
    first.save_state("m", tmp_path / "ckpt")
    second = make_host()
    second.create_adapter("other", AdapterConfig(rank=4, seed=777, optimizer="dimuon"))
    second.load_state("other", tmp_path / "ckpt", optimizer=True)
    train(second, "other", range(3, 5))
    assert_bit_equal(snapshot(second, "other"), snapshot(straight, "m"))
    assert_bit_equal(optimizer_snapshot(second, "other"), optimizer_snapshot(straight, "m"))
    assert second.pool.optimizer("other").step == 5


def test_a_snapshot_mid_step_restores_and_continues_bit_exactly(host, make_host, tmp_path) -> None:
    from workers.engine import snapshots

    host.create_adapter("m", DIMUON)
    train(host, "m", range(2))
    host.forward_backward("m", batch(2))  # gradients pending
    snapshots.write(host.capture("m"), tmp_path / "snap")
    other = make_host()
    other.restore("m", tmp_path / "snap")
    assert other.pool.config("m").optimizer == "dimuon"
    step = DimuonParams(learning_rate=0.01)
    assert host.optim_step("m", step) == other.optim_step("m", step)
    train(host, "m", range(3, 5))
    train(other, "m", range(3, 5))
    assert_bit_equal(snapshot(other, "m"), snapshot(host, "m"))
    assert_bit_equal(optimizer_snapshot(other, "m"), optimizer_snapshot(host, "m"))


def test_spilled_to_disk_and_packed_with_adamw_models_each_as_alone(make_host) -> None:
    small = make_host(max_loaded_adapters=2)
    alone = make_host()
    families = {"d1": "dimuon", "a1": "adamw", "d2": "dimuon", "a2": "adamw"}
    for i, (m, family) in enumerate(families.items()):
        for h in (small, alone):
            h.create_adapter(m, AdapterConfig(rank=4, seed=i, optimizer=family))
    params = {
        "adamw": AdamParams(learning_rate=1e-2, grad_clip_norm=1.0),
        "dimuon": DimuonParams(learning_rate=1e-2, grad_clip_norm=1.0),
    }
    for rnd in range(2):
        requests = [(m, batch(10 * rnd + i)) for i, m in enumerate(families)]
        small.forward_backward_many(requests)
        steps = [(m, params[f]) for m, f in families.items()]
        assert all(not isinstance(r, Exception) for r in small.optim_step_many(steps))
        for m, fwd in requests:
            alone.forward_backward(m, fwd)
            alone.optim_step(m, params[families[m]])
    assert list(small.pool.spill_dir.iterdir())
    for m in families:
        assert_bit_equal(snapshot(small, m), snapshot(alone, m))
        assert_bit_equal(optimizer_snapshot(small, m), optimizer_snapshot(alone, m))


def test_a_packed_step_with_the_wrong_family_fails_alone(host) -> None:
    host.create_adapter("d", DIMUON)
    host.create_adapter("a", AdapterConfig(rank=4, seed=1))
    for m in ("d", "a"):
        host.forward_backward(m, batch(1))
    out = host.optim_step_many(
        [("d", AdamParams(learning_rate=1e-2)), ("a", AdamParams(learning_rate=1e-2))]
    )
    assert isinstance(out[0], Exception) and out[0].field == "adam_params"  # type: ignore[union-attr]
    assert not isinstance(out[1], Exception)
    assert host.has_pending_gradients("d") and not host.has_pending_gradients("a")


def test_a_small_step_raises_the_advantage_weighted_logprob(host) -> None:
    """stable_reinforce on on-policy data, one small Dimuon step: Σ A·Δlogprob > 0."""
    rng = np.random.default_rng(2)
    host.create_adapter("m", DIMUON)
    randomize_adapter(host, "m", seed=3)
    probe = batch(9, n=4, length=10)
    q = host.forward("m", probe).loss_fn_outputs
    data = []
    for d, out in zip(probe.data, q, strict=True):
        mask = np.array([0.0] * 3 + [1.0] * 7, dtype=np.float32)
        adv = (mask * rng.choice([-1.0, 1.0])).astype(np.float32)
        inputs = {
            "target_tokens": d.loss_fn_inputs["target_tokens"],
            "logprobs": out["logprobs"].to_numpy(),
            "advantages": adv,
            "sampled_mask": mask,
        }
        data.append(Datum(model_input=d.model_input, loss_fn_inputs=inputs))
    fwd = ForwardBackwardInput(data=data, loss_fn="stable_reinforce")

    def weighted() -> float:
        outs = host.forward("m", fwd).loss_fn_outputs
        return sum(
            float((o["logprobs"].to_numpy() * d.loss_fn_inputs["advantages"].to_numpy()).sum())
            for o, d in zip(outs, fwd.data, strict=True)
        )

    before = weighted()
    host.forward_backward("m", fwd)
    host.optim_step("m", DimuonParams(learning_rate=1e-4))
    assert weighted() - before > 0
