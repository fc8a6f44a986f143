"""Context as a setting: a session, a model or a sampler asks for a context length up to its base
model's maximum (``context_length``, or tinker's ``<base>:peft:<n>`` names), its requests are
held to it when they arrive (a 400 naming the field), and tokens are billed as at any other
length; charlie sees none of it."""

from __future__ import annotations

import pytest

from controlplane.metering.models import UsageRecord
from controlplane.metering.reports import session_usage
from controlplane.training_sessions.models import Operation, SamplingSession, TrainingModel
from tests.support.tiny_worker import TINY
from tests.support.wire import datum, fwdbwd, open_session, result

pytestmark = pytest.mark.django_db

MAX = 1024  # the tiny model's context


def made(person, runtime, base_model: str = TINY, session_id: str | None = None, **extra):
    sid = session_id or open_session(person)
    r = person.post(
        "create_model",
        {
            "session_id": sid,
            "model_seq_id": 0,
            "base_model": base_model,
            "lora_config": {"rank": 4, "seed": 0},
            **extra,
        },
    )
    if r.status_code != 200:
        return r
    assert result(person, runtime, r.json()) == {"model_id": r.json()["model_id"]}
    return r.json()["model_id"]


def info(person, model_id: str) -> dict:
    return person.post("get_info", {"model_id": model_id}).json()


def test_a_model_asks_for_a_context_and_its_data_are_held_to_it(alice, charlie, runtime):
    mid = made(alice, runtime, context_length=16)
    model = TrainingModel.objects.get(pk=mid)
    assert (model.base_model, model.context_length) == (TINY, 16)
    assert info(alice, mid)["context_length"] == 16
    fits = alice.post("forward_backward", fwdbwd(mid, 1, [datum(list(range(16)))]))
    assert result(alice, runtime, fits.json())["metrics"]["tokens:sum"] == 16.0
    over = alice.post("forward_backward", fwdbwd(mid, 2, [datum([1, 2]), datum(list(range(17)))]))
    body = over.json()
    assert over.status_code == 400, body
    assert body["field"] == "forward_backward_input.data[1].model_input"
    assert "17 tokens, over this model's context of 16 tokens" in body["detail"]
    # refused on arrival, it still took its seq_id: the next one runs
    assert Operation.objects.get(model_id=mid, seq_id=2).status == "failed"
    nxt = alice.post("forward_backward", fwdbwd(mid, 3, [datum([3, 4, 5])]))
    assert result(alice, runtime, nxt.json())["metrics"]["tokens:sum"] == 3.0
    assert charlie.post("get_info", {"model_id": mid}).status_code == 404
    # without a setting: the base model's maximum
    assert info(alice, made(alice, runtime))["context_length"] == MAX


def test_tinkers_peft_names_are_the_same_request(alice, runtime) -> None:
    mid = made(alice, runtime, f"{TINY}:peft:32")
    model = TrainingModel.objects.get(pk=mid)
    assert (model.base_model, model.context_length) == (TINY, 32)
    assert made(alice, runtime, f"{TINY}:peft:32", context_length=32) is not None
    # the name and the field disagree; past the maximum; none at all
    for name, extra, words in (
        (f"{TINY}:peft:32", {"context_length": 64}, "asks for a context of 32 tokens"),
        (f"{TINY}:peft:{MAX + 1}", {}, f"1 to {MAX} tokens"),
        (TINY, {"context_length": MAX + 1}, f"1 to {MAX} tokens"),
        (f"{TINY}:peft:0", {}, f"1 to {MAX} tokens"),
    ):
        r = made(alice, runtime, name, **extra)
        assert r.status_code == 400 and r.json()["field"] == "context_length", r.content
        assert words in r.json()["detail"]
    r = made(alice, runtime, "no/such:peft:64")
    assert r.status_code == 404 and "no/such" in r.json()["detail"]
    # the tokenizer of a peft name is its base's
    files = alice.get("base_models/tokenizer", {"name": f"{TINY}:peft:32"})
    assert files.status_code == 200 and files.json()["base_model"] == TINY
    # the capabilities still list each base with its maximum
    caps = alice.get("get_server_capabilities").json()["supported_models"]
    listed = {c["model_name"]: c["max_context_length"] for c in caps}
    assert listed[TINY] == MAX


def test_a_sampler_is_held_to_its_context(alice, runtime) -> None:
    sid = open_session(alice)
    r = alice.post(
        "create_sampling_session",
        {"session_id": sid, "sampling_session_seq_id": 0, "base_model": f"{TINY}:peft:8"},
    )
    sampler_id = r.json()["sampling_session_id"]
    sampler = SamplingSession.objects.get(pk=sampler_id)
    assert (sampler.base_model, sampler.context_length) == (TINY, 8)
    again = alice.post(  # a retry of the same request opens nothing new
        "create_sampling_session",
        {"session_id": sid, "sampling_session_seq_id": 0, "base_model": f"{TINY}:peft:8"},
    )
    assert again.json()["sampling_session_id"] == sampler_id

    def sample(seq: int, tokens: list[int], max_tokens: int | None):
        params = {"temperature": 0.0, **({"max_tokens": max_tokens} if max_tokens else {})}
        return alice.post(
            "asample",
            {
                "sampling_session_id": sampler_id,
                "seq_id": seq,
                "num_samples": 1,
                "prompt": {"chunks": [{"type": "encoded_text", "tokens": tokens}]},
                "sampling_params": {**params, "stop": []},
            },
        )

    over = sample(1, [1, 2, 3, 4, 5], 4)
    assert over.status_code == 400 and over.json()["field"] == "sampling_params.max_tokens"
    assert "past this sampler's context of 8 tokens" in over.json()["detail"]
    long_prompt = sample(2, list(range(1, 10)), 1)
    assert long_prompt.status_code == 400 and long_prompt.json()["field"] == "prompt"
    fits = result(alice, runtime, sample(3, [1, 2, 3, 4, 5], 3).json())
    assert len(fits["sequences"][0]["tokens"]) == 3
    rest = result(alice, runtime, sample(4, [1, 2, 3, 4, 5], None).json())
    assert len(rest["sequences"][0]["tokens"]) == 3  # the rest of its 8, not of the base's 1024


def test_a_sessions_context_is_its_models_and_samplers_default(alice, runtime) -> None:
    r = alice.post(
        "create_session",
        {"tags": [], "sdk_version": "t", "role_arn": alice.role_arn, "context_length": 24},
    )
    sid = r.json()["session_id"]
    assert alice.get(f"sessions/{sid}").json()["platform"]["context_length"] == 24
    assert info(alice, made(alice, runtime, session_id=sid))["context_length"] == 24
    r = alice.post(
        "create_sampling_session",
        {"session_id": sid, "sampling_session_seq_id": 0, "base_model": TINY},
    )
    assert SamplingSession.objects.get(pk=r.json()["sampling_session_id"]).context_length == 24
    # a model's own wins
    r = alice.post(
        "create_model",
        {"session_id": sid, "model_seq_id": 1, "base_model": TINY, "context_length": 100},
    )
    assert TrainingModel.objects.get(pk=r.json()["model_id"]).context_length == 100
    too_long = alice.post(
        "create_session",
        {"tags": [], "sdk_version": "t", "role_arn": alice.role_arn, "context_length": 0},
    )
    assert too_long.status_code == 400 and too_long.json()["field"] == "context_length"


def test_tokens_cost_the_same_at_any_context(alice, runtime) -> None:
    short, full = made(alice, runtime, context_length=32), made(alice, runtime)
    for mid in (short, full):
        r = alice.post("forward_backward", fwdbwd(mid, 1, [datum(list(range(20)))]))
        result(alice, runtime, r.json())
    billed = {}
    for mid in (short, full):
        session_id = TrainingModel.objects.get(pk=mid).session_id
        usage = session_usage(tenant=alice.tenant, session_id=session_id)
        rows = sorted(UsageRecord.objects.filter(model_id=mid).values_list("meter", "quantity"))
        billed[mid] = (rows, usage["total_quantity"], usage["total_cost"])
    assert billed[short] == billed[full] and float(billed[short][2]) > 0
