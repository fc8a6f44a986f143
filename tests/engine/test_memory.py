"""Worker memory over many session lifecycles: nothing of an ended session stays live, and freed
heap goes back to the OS instead of piling up in glibc's arenas."""

from __future__ import annotations

import gc
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch

from loopwright.types import AdamParams, Datum, ForwardBackwardInput, ModelInput
from workers.engine import memory
from workers.engine.adapters import PLACEHOLDER, AdapterConfig
from workers.engine.host import ModelHost
from workers.engine.sampler import SampleJob

Run = Callable[[Callable[[], object]], object]


def batch(rng: np.random.Generator, rows: int, longest: int) -> ForwardBackwardInput:
    def datum() -> Datum:
        n = int(rng.integers(8, longest))
        return Datum(
            model_input=ModelInput.from_ints(rng.integers(0, 256, n).tolist()),
            loss_fn_inputs={"target_tokens": rng.integers(0, 256, n).tolist()},
        )

    return ForwardBackwardInput(data=[datum() for _ in range(rows)], loss_fn="cross_entropy")


def lifecycle(
    host: ModelHost, folder: Path, i: int, rng: np.random.Generator, big: bool, run: Run
) -> None:
    """A session's life on the worker, with shapes that change every time."""
    model, sampler = f"model-{i}", f"sampler:{i}"
    rows, longest = (int(rng.integers(1, 9)), 1000) if big else (2, 40)
    rank = int(rng.choice([4, 16, 64]))
    run(lambda: host.create_adapter(model, AdapterConfig(rank=rank, seed=i)))
    run(lambda: host.forward_backward(model, batch(rng, rows, longest)))
    run(lambda: host.optim_step(model, AdamParams(learning_rate=1e-3)))
    run(lambda: host.save_state(model, folder, optimizer=True))
    run(lambda: host.load_adapter_from(sampler, folder))
    prompt = rng.integers(0, 256, int(rng.integers(2, 200 if big else 20))).tolist()
    samples = int(rng.integers(1, 16 if big else 4))
    job = SampleJob(prompt=prompt, num_samples=samples, max_tokens=16 if big else 4)
    run(lambda: host.sample(sampler, [job]))
    run(lambda: host.remove_adapter(sampler))  # the sampler adapter outlived by its model...
    run(lambda: host.remove_adapter(model))


def live_tensors() -> tuple[int, int]:
    gc.collect()
    # type(), not isinstance(): some torch objects warn when their __class__ is looked up.
    tensors = [o for o in gc.get_objects() if issubclass(type(o), torch.Tensor)]
    return len(tensors), sum(t.untyped_storage().nbytes() for t in tensors)


def test_ended_sessions_leave_nothing_live(host: ModelHost, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    lifecycle(host, tmp_path / "ckpt", 0, rng, big=False, run=lambda f: f())  # lazy caches
    before = live_tensors()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(1, 9):
            lifecycle(host, tmp_path / "ckpt", i, rng, big=False, run=lambda f: f())
    assert live_tensors() == before
    assert host.pool.ids() == [] and list(host.pool.model.peft_config) == [PLACEHOLDER]
    assert list(host.pool.spill_dir.iterdir()) == []
    # peft warns (with a new message each time) when the active adapter is deleted.
    assert [str(w.message) for w in caught if "deleted" in str(w.message)] == []


@pytest.mark.skipif(not memory.can_release(), reason="freed heap is only returned with glibc")
def test_resident_size_stays_flat_over_many_sessions(host: ModelHost, tmp_path: Path) -> None:
    """Two threads take turns, as the Celery task and the wake-up drainer do: each gets its own
    arena. Before freed heap was returned, these 16 lifecycles grew the process by ~200-700 MB."""
    rng = np.random.default_rng(1)
    threads = [ThreadPoolExecutor(1), ThreadPoolExecutor(1)]
    turn = iter(range(1 << 30))

    def run(fn: Callable[[], object]) -> object:
        return threads[next(turn) % 2].submit(fn).result()

    memory.release_free_heap()  # whatever earlier tests left free in the arenas
    start = memory.resident_bytes()
    assert start is not None
    try:
        for i in range(16):
            lifecycle(host, tmp_path / "ckpt", i, rng, big=True, run=run)
    finally:
        for t in threads:
            t.shutdown()
    grown = (memory.resident_bytes() or 0) - start
    assert grown < 150 << 20, f"resident size grew by {grown >> 20} MB"


def test_release_follows_growth_past_the_slack(monkeypatch: pytest.MonkeyPatch) -> None:
    resident = [1000]
    released: list[int] = []

    def release() -> bool:
        released.append(resident[0])
        resident[0] = 1010  # some of it is live
        return True

    monkeypatch.setattr(memory, "resident_bytes", lambda: resident[0])
    monkeypatch.setattr(memory, "release_free_heap", release)
    releaser = memory.HeapReleaser(slack_bytes=100)
    for size, expect in [
        (1050, []),
        (900, []),
        (1001, [1001]),
        (1080, [1001]),
        (1200, [1001, 1200]),
    ]:
        resident[0] = size
        releaser.settle()
        assert released == expect, size
    releaser.settle(force=True)  # whatever the growth
    assert released == [1001, 1200, 1010] and releaser.releases == 3
