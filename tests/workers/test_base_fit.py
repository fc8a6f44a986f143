"""Whether a worker holds its base whole or must shard it: its memory parsed, and the fit worked
out from the base's config with the placement arithmetic (checked by hand for the tiny model:
its parameters, a rank-32 adapter's state, a pass's activations, the reserve)."""

from __future__ import annotations

import pytest

from workers.base_fit import (
    GIB,
    RESERVE,
    fit_of,
    host_memory_refusal,
    parse_memory,
    rank_need,
    refused,
)
from workers.engine.catalog import TINY_MODEL, default_catalog
from workers.engine.distributed.placement import MIN_PASS_TOKENS, ModelShape
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
    whole = rank_need(tiny, TINY_MODEL, config, 1)
    fit = fit_of(tiny, TINY_MODEL, config, whole)
    assert (fit.ranks, fit.pass_tokens, fit.whole_bytes) == (1, 16384, whole)
    # short of that: smaller passes first, the base still whole
    small_whole = rank_need(tiny, TINY_MODEL, config, 1, MIN_PASS_TOKENS)
    fit = fit_of(tiny, TINY_MODEL, config, (whole + small_whole) // 2)
    assert fit.ranks == 1 and MIN_PASS_TOKENS <= fit.pass_tokens < 16384
    assert rank_need(tiny, TINY_MODEL, config, 1, fit.pass_tokens) <= (whole + small_whole) // 2
    # short even with the smallest passes: sharded over two
    half = rank_need(tiny, TINY_MODEL, config, 2, MIN_PASS_TOKENS)
    assert half < small_whole
    memory = (small_whole + half) // 2
    between = fit_of(tiny, TINY_MODEL, config, memory)
    assert between.ranks == 2 and MIN_PASS_TOKENS <= between.pass_tokens < 16384
    assert rank_need(tiny, TINY_MODEL, config, 2, between.pass_tokens) <= memory
    small = fit_of(tiny, TINY_MODEL, config, GIB // 4)  # not even a small pass's activations
    assert small.ranks is None
    assert "does not fit workers of 0.25 GiB" in str(refused(small, TINY_MODEL))
    # a smaller pass budget needs less: the same memory now holds it whole
    assert fit_of(tiny, TINY_MODEL, HostConfig(max_batch_tokens=1024), GIB).ranks == 1


def test_a_worker_that_shards_needs_host_memory_for_the_whole_weights(tiny) -> None:
    """It loads the base whole into host memory before keeping its shards."""
    config = HostConfig()
    whole, half = (rank_need(tiny, TINY_MODEL, config, n, MIN_PASS_TOKENS) for n in (1, 2))
    fit = fit_of(tiny, TINY_MODEL, config, (whole + half) // 2)
    assert fit.ranks == 2 and fit.weights_bytes > 0
    assert host_memory_refusal(fit, TINY_MODEL, fit.weights_bytes) is None
    short = host_memory_refusal(fit, TINY_MODEL, fit.weights_bytes - 1)
    assert short is not None and "loads its weights whole into host memory" in str(short)
    # a worker that holds it whole is never refused for this
    assert host_memory_refusal(fit_of(tiny, TINY_MODEL, config, whole), TINY_MODEL, 1) is None


def test_a_cpu_worker_not_given_its_memory_holds_its_base_whole(tiny) -> None:
    """The host's RAM is shared (and the budget a worst case): however big the estimate, it
    neither shards nor refuses unless ``--memory`` says how much it may use."""
    huge = HostConfig(max_batch_tokens=10**9)  # an estimate far above any host's RAM
    fit = fit_of(tiny, TINY_MODEL, huge, None)
    assert fit.ranks == 1 and fit.whole_bytes > fit.memory_bytes
    given = fit_of(tiny, TINY_MODEL, huge, fit.memory_bytes)  # told: passes made to fit
    assert given.ranks == 1 and given.pass_tokens < 10**9
    assert rank_need(tiny, TINY_MODEL, huge, 1, given.pass_tokens) <= fit.memory_bytes
