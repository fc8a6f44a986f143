"""The optimizer family is part of an adapter's state: chosen at creation, saved, checked on load."""

from __future__ import annotations

import json

import pytest

from loopwright.types import CreateModelRequest, OptimStepRequest
from workers.engine.adapters import AdapterConfig
from workers.engine.checkpoints import META_FILE
from workers.engine.errors import CheckpointError, InvalidInput
from workers.engine.optim import optimizer_family

from .test_adapters import assert_bit_equal, optimizer_snapshot, snapshot, train


def test_adamw_is_the_default_and_dimuon_is_refused_by_name(host) -> None:
    assert optimizer_family(None) == optimizer_family({"type": "adamw"}) == "adamw"
    with pytest.raises(InvalidInput, match="dimuon optimizer is not supported") as err:
        optimizer_family({"type": "dimuon", "version": 1})
    assert err.value.field == "optimizer_config.type"
    with pytest.raises(InvalidInput, match="dimuon"):
        host.create_adapter("m", AdapterConfig(rank=2, optimizer="dimuon"))
    assert not host.has_adapter("m")


def test_wire_types_refuse_dimuon_before_anything_is_sent() -> None:
    body = {"session_id": "s", "model_seq_id": 0, "base_model": "b"}
    assert CreateModelRequest(**body).optimizer_config is None  # AdamW
    chosen = CreateModelRequest(**body, optimizer_config={"type": "adamw"}).optimizer_config
    assert chosen is not None and chosen.type == "adamw"
    with pytest.raises(ValueError, match="dimuon optimizer is not supported"):
        CreateModelRequest(**body, optimizer_config={"type": "dimuon", "version": 1})
    step = {"model_id": "m", "optimizer_params": {"type": "dimuon", "learning_rate": 0.1}}
    with pytest.raises(ValueError, match="optimizer_params: the dimuon optimizer"):
        OptimStepRequest.model_validate(step)


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


def test_state_of_another_family_loads_only_without_the_optimizer(host, tmp_path) -> None:
    host.create_adapter("m", AdapterConfig(rank=4, seed=5))
    train(host, "m", range(1))
    host.save_state("m", tmp_path / "ckpt")
    _rewrite_optimizer(tmp_path / "ckpt", "dimuon")
    host.create_adapter("n", AdapterConfig(rank=4, seed=6))
    before = snapshot(host, "n")
    with pytest.raises(CheckpointError, match="holds dimuon state"):
        host.load_state("n", tmp_path / "ckpt", optimizer=True)
    assert_bit_equal(snapshot(host, "n"), before)
    host.load_state("n", tmp_path / "ckpt", optimizer=False)
    assert_bit_equal(snapshot(host, "n"), snapshot(host, "m"))
