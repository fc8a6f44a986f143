"""Whether a worker holds its base whole or must shard it: its memory parsed, and the fit worked
out from the base's config with the placement arithmetic (checked by hand for the tiny model:
its parameters, a rank-32 adapter's state, a pass's activations, the reserve)."""

from __future__ import annotations

import pytest

from workers.base_fit import GIB, RESERVE, fit_of, parse_memory, rank_need, refused
from workers.engine.catalog import TINY_MODEL, default_catalog
from workers.engine.distributed.placement import ModelShape
from workers.engine.host import HostConfig


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("80GiB", 80 * 2**30),
        ("141 GB", 141 * 10**9),
        ("512MiB", 512 * 2**20),
        ("1.5g", int(1.5 * 2**30)),
        ("123456", 123456),
    ],
)
def test_memory_amounts(text: str, value: int) -> None:
    assert parse_memory(text) == value


@pytest.mark.parametrize("text", ["", "lots", "80 parsecs", "-1GiB", "0"])
def test_what_is_not_an_amount_is_refused_by_name(text: str) -> None:
    with pytest.raises(ValueError, match="LOOPWRIGHT_WORKER_MEMORY"):
        parse_memory(text)


@pytest.fixture(scope="module")
def tiny():
    return default_catalog().materialize(TINY_MODEL).path


def test_the_need_of_a_whole_rank_by_hand(tiny) -> None:
    import json

    shape = ModelShape.of_config("tiny", json.loads((tiny / "config.json").read_text()))
    config = HostConfig()  # float32 on cpu, 16,384 tokens per pass, 65,536 KV tokens
    weights = shape.params() * 4
    lora = shape.lora_params(32) * 16
    activations = 16384 * shape.activation_bytes_per_token(4)
    kv = 65536 * shape.kv_bytes_per_token(4)
    expected = weights + lora + max(activations, kv) + RESERVE["cpu"]
    assert rank_need(tiny, TINY_MODEL, config, 1) == expected


def test_a_worker_holds_it_whole_or_shards_it_or_cannot_serve_it(tiny) -> None:
    config = HostConfig()
    whole, half = (rank_need(tiny, TINY_MODEL, config, n) for n in (1, 2))
    assert half < whole
    assert fit_of(tiny, TINY_MODEL, config, whole).ranks == 1
    between = fit_of(tiny, TINY_MODEL, config, (whole + half) // 2)
    assert (between.ranks, between.whole_bytes) == (2, whole)
    small = fit_of(tiny, TINY_MODEL, config, GIB // 4)  # not even a pass's activations
    assert small.ranks is None
    assert "does not fit workers of 0.25 GiB" in str(refused(small, TINY_MODEL))
    # a smaller pass budget needs less: the same memory now holds it whole
    assert fit_of(tiny, TINY_MODEL, HostConfig(max_batch_tokens=1024), GIB).ranks == 1
