"""``sampling_params.stop`` as tinker 0.38 defines it, through the API: left out (``None``) keeps
the end-of-sequence token as a stop; ``[]`` stops at nothing, not even end-of-sequence, so
generation runs to ``max_tokens``."""

from __future__ import annotations

import pytest

from tests.support.wire import ModelRun, datum, open_session, result

pytestmark = pytest.mark.django_db

EOS = 258  # the tiny model's end-of-sequence token (tests/engine/test_catalog.py)


def test_an_empty_stop_list_runs_past_end_of_sequence(alice, runtime):
    run = ModelRun(alice, runtime, open_session(alice))
    # teach the model to say end-of-sequence after anything
    data = [datum([1, 2, 3], targets=[EOS, EOS, EOS])]
    for _ in range(30):
        run.run(
            "forward_backward", forward_backward_input={"data": data, "loss_fn": "cross_entropy"}
        )
        run.run("optim_step", adam_params={"learning_rate": 0.05})
    session = alice.post("get_info", {"model_id": run.id}).json()["session_id"]
    sampler = alice.post(
        "create_sampling_session",
        {"session_id": session, "sampling_session_seq_id": 0, "model_id": run.id},
    ).json()["sampling_session_id"]

    def sample(seq: int, **params) -> dict:
        body = {
            "sampling_session_id": sampler,
            "seq_id": seq,
            "prompt": {"chunks": [{"tokens": [1, 2, 3]}]},
            "sampling_params": {"max_tokens": 12, "seed": 0, **params},
        }
        r = alice.post("asample", body)
        assert r.status_code == 200, r.content
        return result(alice, runtime, r.json())["sequences"][0]

    kept = sample(0)  # stop left out: end-of-sequence ends it
    assert kept["stop_reason"] == "stop" and kept["tokens"][-1] == EOS
    assert len(kept["tokens"]) < 12
    explicit_none = sample(1, stop=None)
    assert explicit_none["tokens"] == kept["tokens"]
    nothing = sample(2, stop=[])  # no stop at all
    assert nothing["stop_reason"] == "length" and len(nothing["tokens"]) == 12
    assert EOS in nothing["tokens"][:-1]
