"""Snapshots: an adapter captured mid-step (gradients pending) and restored on another host
continues bit for bit like the one that never stopped."""

from __future__ import annotations

import pytest
import torch

from loopwright.types import AdamParams, Datum, ForwardBackwardInput, ModelInput
from workers.engine import checkpoints, snapshots
from workers.engine.adapters import AdapterConfig
from workers.engine.errors import CheckpointError

LORA = AdapterConfig(rank=4, alpha=8, seed=3)


def _batch(offset: int) -> ForwardBackwardInput:
    tokens = [(offset * 7 + i * 13) % 250 for i in range(12)]
    datum = Datum(
        model_input=ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * 11},
    )
    return ForwardBackwardInput(data=[datum], loss_fn="cross_entropy")


def _state(host, model_id: str) -> dict[str, torch.Tensor]:
    params = host.pool.parameters(model_id)
    state = {f"w/{k}": p.detach().clone() for k, p in params.items()}
    state |= {f"g/{k}": p.grad.clone() for k, p in params.items() if p.grad is not None}
    opt = host.pool.optimizer(model_id)
    state |= {f"o/{k}": v.clone() for k, v in opt.tensors().items()}
    state["step"] = torch.tensor(opt.step)
    return state


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_a_snapshot_taken_between_steps_restores_bit_for_bit(host, make_host, tmp_path) -> None:
    host.create_adapter("m", LORA)
    for i in range(3):
        host.forward_backward("m", _batch(i))
        host.optim_step("m", AdamParams(learning_rate=1e-2))
    host.forward_backward("m", _batch(3))  # gradients pending: mid-step
    assert host.has_pending_gradients("m")
    snap = host.capture("m")
    before = _state(host, "m")
    snapshots.write(snap, tmp_path / "snap")
    assert (tmp_path / "snap" / snapshots.GRADIENTS_FILE).is_file()

    other = make_host()
    other.restore("m", tmp_path / "snap")
    _same(_state(other, "m"), before)
    for i in range(4, 7):  # both go on: the same results, the same weights
        a = host.optim_step("m", AdamParams(learning_rate=1e-2)).metrics
        b = other.optim_step("m", AdamParams(learning_rate=1e-2)).metrics
        assert a == b
        assert (
            host.forward_backward("m", _batch(i)).metrics
            == other.forward_backward("m", _batch(i)).metrics
        )
    _same(_state(other, "m"), _state(host, "m"))


def test_a_captured_state_is_a_copy(host, tmp_path) -> None:
    """Training goes on while a snapshot waits to be written: the snapshot does not change."""
    host.create_adapter("m", LORA)
    host.forward_backward("m", _batch(0))
    snap = host.capture("m")
    frozen = {k: v.clone() for k, v in snap.adapter.items()}
    host.optim_step("m", AdamParams(learning_rate=1e-1))
    for key, value in snap.adapter.items():
        assert torch.equal(value, frozen[key])
    assert snap.nbytes > 0


def test_a_snapshot_without_pending_gradients_is_a_plain_training_state(
    host, make_host, tmp_path
) -> None:
    """Written after an optimizer step, a snapshot is an ordinary state save: load_state opens
    it, and it has no gradients file."""
    host.create_adapter("m", LORA)
    host.forward_backward("m", _batch(0))
    host.optim_step("m", AdamParams(learning_rate=1e-2))
    assert not host.has_pending_gradients("m")
    snapshots.write(host.capture("m"), tmp_path / "snap")
    assert not (tmp_path / "snap" / snapshots.GRADIENTS_FILE).exists()
    other = make_host()
    other.create_adapter("m", LORA)
    other.load_state("m", tmp_path / "snap", optimizer=True)
    _same(_state(other, "m"), _state(host, "m"))


def test_a_damaged_snapshot_changes_nothing(host, make_host, tmp_path) -> None:
    host.create_adapter("m", LORA)
    host.forward_backward("m", _batch(0))
    snapshots.write(host.capture("m"), tmp_path / "snap")
    (tmp_path / "snap" / snapshots.GRADIENTS_FILE).write_bytes(b"not a tensor file")
    other = make_host()
    other.create_adapter("m", AdapterConfig(rank=2, seed=1))
    kept = _state(other, "m")
    with pytest.raises(CheckpointError, match="gradients"):
        other.restore("m", tmp_path / "snap")
    _same(_state(other, "m"), kept)  # read and checked before anything changed
    (tmp_path / "snap" / checkpoints.META_FILE).unlink()
    with pytest.raises(CheckpointError):
        other.restore("m", tmp_path / "snap")


def test_an_adapter_spilled_to_make_room_is_handed_over_whole(make_host, tmp_path) -> None:
    """The host tells who listens of every adapter it spills to its disk (which dies with the
    worker), with its whole state: written as a snapshot, it restores bit for bit."""
    host = make_host(max_loaded_adapters=1)
    spilled: list[tuple[str, snapshots.Snapshot]] = []
    host.on_evict = lambda model_id, state: spilled.append((model_id, state))
    host.create_adapter("a", LORA)
    host.forward_backward("a", _batch(0))
    host.optim_step("a", AdamParams(learning_rate=1e-2))
    host.forward_backward("a", _batch(1))  # with pending gradients
    before = _state(host, "a")
    host.create_adapter("b", AdapterConfig(rank=2, seed=5))  # room for b: a goes to disk
    assert [m for m, _ in spilled] == ["a"]
    snapshots.write(spilled[0][1], tmp_path / "a")
    other = make_host()
    other.restore("a", tmp_path / "a")
    _same(_state(other, "a"), before)
    _same(_state(host, "a"), before)  # and it comes back from the spill unchanged
