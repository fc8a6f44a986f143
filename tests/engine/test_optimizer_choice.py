"""The optimizer family (AdamW or Dimuon) is part of an adapter's state: chosen at creation,
saved, checked on load."""

from __future__ import annotations

import json

import pytest

from loopwright.types import (
    AdamParams,
    CreateModelRequest,
    DimuonOptimizerConfig,
    DimuonParams,
    OptimStepRequest,
)
from workers.engine.adapters import AdapterConfig
from workers.engine.checkpoints import META_FILE
from workers.engine.errors import CheckpointError, InvalidInput
from workers.engine.optim import optimizer_family

from .test_adapters import ADAM, assert_bit_equal, batch, optimizer_snapshot, snapshot, train


def test_adamw_is_the_default_and_dimuon_version_1_the_other_family(host) -> None:
    assert optimizer_family(None) == optimizer_family({"type": "adamw"}) == "adamw"
    assert optimizer_family({"type": "dimuon", "version": 1}) == "dimuon"
    for config, field in (
        ({"type": "sgd"}, "optimizer_config.type"),
        ({"type": "dimuon", "version": 2}, "optimizer_config.version"),
    ):
        with pytest.raises(InvalidInput) as err:
            optimizer_family(config)
        assert err.value.field == field
    with pytest.raises(InvalidInput, match="unknown optimizer 'sgd'"):
        host.create_adapter("m", AdapterConfig(rank=2, optimizer="sgd"))
    assert not host.has_adapter("m")
    host.create_adapter("d", AdapterConfig(rank=2, optimizer="dimuon"))
    assert host.pool.config("d").optimizer == "dimuon"


def test_wire_types_take_both_families_and_refuse_others_before_anything_is_sent() -> None:
    body = {"session_id": "s", "model_seq_id": 0, "base_model": "b"}
    assert CreateModelRequest(**body).optimizer_config is None  # AdamW
    chosen = CreateModelRequest(**body, optimizer_config={"type": "adamw"}).optimizer_config
    assert chosen is not None and chosen.type == "adamw"
    dimuon = CreateModelRequest(**body, optimizer_config={"type": "dimuon", "version": 1})
    assert dimuon.optimizer_config == DimuonOptimizerConfig()
    for bad in ({"type": "sgd"}, {"type": "dimuon", "version": 2}, {"type": "dimuon", "lr": 1}):
        with pytest.raises(ValueError, match="optimizer_config"):
            CreateModelRequest(**body, optimizer_config=bad)
    step = {"model_id": "m", "optimizer_params": {"type": "dimuon", "learning_rate": 0.1}}
    parsed = OptimStepRequest.model_validate(step)
    assert parsed.params == DimuonParams(learning_rate=0.1)
    assert "adam_params" not in parsed.model_dump(mode="json")
    adam = OptimStepRequest(model_id="m", adam_params=AdamParams())
    assert "optimizer_params" not in adam.model_dump(mode="json")  # the body it always was
    for bad in (
        {"model_id": "m"},
        {**step, "adam_params": {}},
        {"model_id": "m", "optimizer_params": {"type": "adamw", "learning_rate": 0.1}},
        {"model_id": "m", "optimizer_params": {"type": "dimuon", "learning_rate": -1}},
        {"model_id": "m", "optimizer_params": {"type": "dimuon", "learning_rate": 1, "beta1": 1}},
        # fields of later tinker releases whose definition is not published are refused
        {"model_id": "m", "optimizer_params": {"learning_rate": 1, "damping": 0.1}},
    ):
        with pytest.raises(ValueError):
            OptimStepRequest.model_validate(bad)


def _rewrite_optimizer(path, value: str | None) -> None:
    meta = json.loads((path / META_FILE).read_text())
    if value is None:
        del meta["lora"]["optimizer"]
    else:
        meta["lora"]["optimizer"] = value
    (path / META_FILE).write_text(json.dumps(meta))


def test_saved_with_the_state_and_older_checkpoints_read_as_adamw(make_host, tmp_path) -> None:
    first = make_host()
    first.create_adapter("m", AdapterConfig(rank=4, seed=5))
    train(first, "m", range(2))
    first.save_state("m", tmp_path / "ckpt")
    assert json.loads((tmp_path / "ckpt" / META_FILE).read_text())["lora"]["optimizer"] == "adamw"
    _rewrite_optimizer(tmp_path / "ckpt", None)  # as written before the family was recorded
    second = make_host()
    second.create_adapter("n", AdapterConfig(rank=4, seed=9))
    second.load_state("n", tmp_path / "ckpt", optimizer=True)
    assert second.pool.config("n").optimizer == "adamw"
    assert_bit_equal(snapshot(second, "n"), snapshot(first, "m"))
    assert_bit_equal(optimizer_snapshot(second, "n"), optimizer_snapshot(first, "m"))


DIMUON = DimuonParams(learning_rate=0.02, grad_clip_norm=1.0)


@pytest.mark.parametrize(("saved", "loaded"), [("dimuon", "adamw"), ("adamw", "dimuon")])
def test_state_of_another_family_loads_only_without_the_optimizer(
    host, tmp_path, saved, loaded
) -> None:
    host.create_adapter("m", AdapterConfig(rank=4, seed=5, optimizer=saved))
    host.forward_backward("m", batch(0))
    host.optim_step("m", DIMUON if saved == "dimuon" else ADAM)
    host.save_state("m", tmp_path / "ckpt")
    host.create_adapter("n", AdapterConfig(rank=4, seed=6, optimizer=loaded))
    before = snapshot(host, "n")
    with pytest.raises(CheckpointError, match=f"holds {saved} state"):
        host.load_state("n", tmp_path / "ckpt", optimizer=True)
    assert_bit_equal(snapshot(host, "n"), before)
    host.load_state("n", tmp_path / "ckpt", optimizer=False)
    assert_bit_equal(snapshot(host, "n"), snapshot(host, "m"))
    assert host.pool.config("n").optimizer == loaded and host.pool.optimizer("n").step == 0


@pytest.mark.parametrize(("family", "sent"), [("dimuon", ADAM), ("adamw", DIMUON)])
def test_a_step_of_the_other_family_is_refused_naming_its_field(host, family, sent) -> None:
    host.create_adapter("m", AdapterConfig(rank=4, seed=5, optimizer=family))
    host.forward_backward("m", batch(0))
    weights = snapshot(host, "m")
    grads = {k: p.grad.clone() for k, p in host.pool.parameters("m").items()}
    with pytest.raises(InvalidInput, match=f"this model's optimizer is {family}") as err:
        host.optim_step("m", sent)
    assert err.value.field == ("adam_params" if family == "dimuon" else "optimizer_params")
    assert_bit_equal(snapshot(host, "m"), weights)
    assert_bit_equal({k: p.grad for k, p in host.pool.parameters("m").items()}, grads)
    assert host.pool.optimizer("m").step == 0
