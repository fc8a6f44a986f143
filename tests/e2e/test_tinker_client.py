"""The official tinker SDK (0.24.1) drives a session against our server."""

from __future__ import annotations

import gc

import pytest

from .stack import TINY

pytestmark = [
    pytest.mark.e2e,
    # tinker's own background event loop leaves its sockets to the garbage collector
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]


@pytest.fixture(autouse=True)
def _collect_tinker_sockets():
    """Collect what tinker left behind while this module's warning filters still apply."""
    yield
    gc.collect()


def test_official_tinker_sdk_trains_samples_and_saves(pg_stack, monkeypatch) -> None:
    tinker = pytest.importorskip("tinker")
    from tinker import types

    # the official SDK sends no role: a key of the session role starts sessions as that role
    monkeypatch.setenv("TINKER_API_KEY", pg_stack.role_key("alice"))
    service = tinker.ServiceClient(base_url=pg_stack.url)
    caps = service.get_server_capabilities()
    assert TINY in [m.model_name for m in caps.supported_models]
    tc = service.create_lora_training_client(base_model=TINY, rank=4)
    tokens = [104, 101, 108, 108, 111, 32, 119, 111]
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * (len(tokens) - 1)},
    )
    fb = tc.forward_backward([datum], "cross_entropy")
    opt = tc.optim_step(types.AdamParams(learning_rate=1e-2))
    out = fb.result()
    assert out.metrics["loss:sum"] > 0 and len(out.loss_fn_outputs) == 1
    opt.result()
    sampler = tc.save_weights_and_get_sampling_client()
    res = sampler.sample(
        prompt=types.ModelInput.from_ints(tokens[:3]),
        num_samples=2,
        sampling_params=types.SamplingParams(max_tokens=4, stop=[]),
    ).result()
    assert len(res.sequences) == 2
    for seq in res.sequences:  # four tokens, or fewer when end-of-sequence was drawn
        assert len(seq.tokens) == 4 or (seq.stop_reason == "stop" and seq.tokens[-1] == 258)
    saved = tc.save_state("tinker-ckpt").result()
    assert saved.path.endswith("/weights/tinker-ckpt")
    info = tc.get_info()
    assert info.model_id == tc.model_id
