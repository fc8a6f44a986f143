"""Small engine calls run on one CPU thread (the others would only spin and take the cores the
control plane and the database need); large ones on the usual number; the number is restored."""

from __future__ import annotations

import pytest
import torch

from controlplane.metering.tokens import work_tokens
from tests.support.wire import create_model, datum, fwdbwd, open_session, result
from workers.cpu_threads import SMALL_WORK, cpu_threads, threads_for


def test_threads_for_the_work() -> None:
    tiny, smollm2 = 792_448, 134_515_008
    assert threads_for(10, tiny, 4) == 1
    assert threads_for(int(SMALL_WORK // tiny) + 1, tiny, 4) == 4
    assert threads_for(7, smollm2, 4) == 1
    assert threads_for(8, smollm2, 4) == 4


def test_the_block_runs_with_the_count_and_restores_it() -> None:
    usual = torch.get_num_threads()
    with cpu_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == usual
    with pytest.raises(RuntimeError), cpu_threads(1):
        raise RuntimeError("the engine failed")
    assert torch.get_num_threads() == usual


def test_work_tokens_of_each_kind() -> None:
    data = [datum([1, 2, 3]), datum([4, 5])]
    assert work_tokens("forward_backward", {"forward_backward_input": {"data": data}}) == 5
    assert work_tokens("forward", {"forward_input": {"data": data}}) == 5
    prompt = {"chunks": [{"type": "encoded_text", "tokens": [1, 2, 3, 4]}]}
    sample = {"prompt": prompt, "num_samples": 3, "sampling_params": {"max_tokens": 16}}
    assert work_tokens("sample", sample) == 4 + 3 * 16
    assert work_tokens("optim_step", {"adam_params": {}}) is None


@pytest.mark.django_db
def test_a_small_operation_runs_on_one_thread(alice, runtime, monkeypatch) -> None:
    if torch.get_num_threads() < 2:
        torch.set_num_threads(2)
    usual = torch.get_num_threads()
    runtime.runner.usual_threads = usual
    seen: list[int] = []
    real = runtime.host.forward_backward_many

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(runtime.host, "forward_backward_many", spy)
    mid = create_model(alice, runtime, open_session(alice))
    small = alice.post("forward_backward", fwdbwd(mid, 1, [datum([1, 2, 3])])).json()
    assert "metrics" in result(alice, runtime, small)
    big = [datum(list(range(1, 255)) * 3)] * 2  # 1,524 tokens × ~0.8M parameters: over the line
    large = alice.post("forward_backward", fwdbwd(mid, 2, big)).json()
    assert "metrics" in result(alice, runtime, large)
    assert seen == [1, usual]
    assert torch.get_num_threads() == usual
