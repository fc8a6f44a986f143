"""Recorded sampling and provenance: a sample made with ``record_stability_info`` is recorded with
its completion; training requests of the same session cite its sequences in provenance spans,
which are checked against the recording (each refusal a 4xx naming the datum and span, taking its
seq_id as a failed operation, the model going on); ``stable_reinforce`` takes the recorded
logprobs. Recordings are the session's alone (bob's other session and charlie get the answer an
id that never existed gets), last a day after their last use, are bounded by a quota and go with
their session."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
from django.utils import timezone

from controlplane.housekeeping.janitor import sweep
from controlplane.quotas.services import quota_set
from controlplane.training_sessions.models import Operation, RecordedSample, Session
from controlplane.training_sessions.services.recordings import recordings_expire
from loopwright.proto.fwdbwd import encode_forward_backward
from loopwright.types import ForwardBackwardInput
from tests.support.tiny_worker import TINY
from tests.support.wire import ModelRun, open_session, result
from workers.executor import engine_batch

pytestmark = pytest.mark.django_db

PROMPT = [5, 6, 7, 8, 9]


def sampler_of(person, run: ModelRun, seq: int = 0) -> str:
    session = person.post("get_info", {"model_id": run.id}).json()["session_id"]
    r = person.post(
        "create_sampling_session",
        {"session_id": session, "sampling_session_seq_id": seq, "model_id": run.id},
    )
    assert r.status_code == 200, r.content
    return r.json()["sampling_session_id"]


def sample(person, runtime, sampler: str, seq: int, *, record: bool = True, n: int = 2) -> dict:
    r = person.post(
        "asample",
        {
            "sampling_session_id": sampler,
            "seq_id": seq,
            "num_samples": n,
            "prompt": {"chunks": [{"tokens": PROMPT}]},
            "sampling_params": {"max_tokens": 4, "seed": seq, "stop": []},
            "record_stability_info": record,
        },
    )
    assert r.status_code == 200, r.content
    return result(person, runtime, r.json())


def datum_of(seq: dict, *, advantage: float = 1.0, spans: bool = True) -> dict:
    """rl_loop's datum (tinker-cookbook 0.6.1 ``with_sampled_provenance``): the prompt and all
    but the last sampled token in, the targets shifted by one, prompt targets padded."""
    sampled = seq["tokens"]
    ob = len(PROMPT) - 1
    tokens = PROMPT + sampled[:-1]
    datum: dict = {
        "model_input": {"chunks": [{"type": "encoded_text", "tokens": tokens}]},
        "loss_fn_inputs": {
            "target_tokens": {"data": [0] * ob + sampled, "dtype": "int64"},
            "logprobs": {"data": [0.0] * ob + [-9.0] * len(sampled), "dtype": "float32"},
            "advantages": {"data": [0.0] * ob + [advantage] * len(sampled), "dtype": "float32"},
        },
    }
    if spans:
        sid = seq["sequence_id"]
        datum["model_input_spans"] = [
            {"type": "prompt_tokens", "sequence_id": sid, "length": len(PROMPT)},
            {"type": "sampled_tokens", "sequence_id": sid, "length": len(sampled) - 1},
        ]
        datum["loss_fn_input_spans"] = [
            {"type": "prompt_tokens", "sequence_id": sid, "offset": 1, "length": ob},
            {"type": "sampled_tokens", "sequence_id": sid, "length": len(sampled)},
        ]
    return datum


@pytest.fixture
def run(alice, runtime) -> ModelRun:
    return ModelRun(alice, runtime, open_session(alice))


@pytest.fixture
def recorded(alice, runtime, run) -> dict:
    return sample(alice, runtime, sampler_of(alice, run), 0)


def test_a_recorded_sample_keeps_its_prompt_tokens_and_logprobs(alice, runtime, run, recorded):
    (row,) = RecordedSample.objects.all()
    ids = [s["sequence_id"] for s in recorded["sequences"]]
    assert ids == [f"{row.id}:0", f"{row.id}:1"]
    assert np.frombuffer(bytes(row.prompt), "<i4").tolist() == PROMPT
    tokens = [t for s in recorded["sequences"] for t in s["tokens"]]
    logprobs = [lp for s in recorded["sequences"] for lp in s["logprobs"]]
    assert np.frombuffer(bytes(row.tokens), "<i4").tolist() == tokens
    np.testing.assert_array_equal(np.frombuffer(bytes(row.logprobs), "<f4"), logprobs)
    assert row.size_bytes == 4 * (len(PROMPT) + 2 * len(tokens))
    assert row.session_id == alice.post("get_info", {"model_id": run.id}).json()["session_id"]
    assert timedelta(hours=23) < row.expires_at - timezone.now() <= timedelta(days=1)
    # a sample without the option records nothing
    sample(alice, runtime, sampler_of(alice, run, seq=1), 0, record=False)
    assert RecordedSample.objects.count() == 1


def test_stable_reinforce_takes_the_recorded_logprobs(alice, runtime, run, recorded):
    seqs = recorded["sequences"]
    data = [datum_of(seqs[0], advantage=1.0), datum_of(seqs[1], advantage=-1.0)]
    r = run.submit(
        "forward_backward", forward_backward_input={"data": data, "loss_fn": "stable_reinforce"}
    )
    assert r.status_code == 200, r.content
    op = Operation.objects.get(pk=r.json()["request_id"])
    batch = engine_batch(op.payload, "forward_backward_input")
    ob = len(PROMPT) - 1
    for datum, seq in zip(batch.data, seqs, strict=True):
        inputs = datum.loss_fn_inputs
        # the recorded logprobs where a target was sampled; the client's (0.0) before
        np.testing.assert_array_equal(
            inputs["logprobs"].to_numpy(), np.float32([0.0] * ob + seq["logprobs"])
        )
        assert inputs["sampled_mask"].to_numpy().tolist() == [0.0] * ob + [1.0] * 4
    # the client's own request is kept as it was sent; a retry gets the same operation
    sent = op.payload["forward_backward_input"]["data"][0]["loss_fn_inputs"]["logprobs"]["data"]
    assert sent[-1] == -9.0
    again = alice.post(
        "forward_backward",
        {
            "model_id": run.id,
            "seq_id": run.seq,
            "forward_backward_input": {"data": data, "loss_fn": "stable_reinforce"},
        },
    )
    assert again.json()["request_id"] == op.pk


def test_stable_reinforce_trains_on_the_recorded_logprobs(alice, runtime, run, recorded):
    """The adapter has not moved since the sample (its LoRA starts at zero): the trainer's
    logprobs are the sampler's, every ratio is 1, and the loss is −Σ A over the sampled tokens.
    Had the engine read the client's logprobs (−9), every ratio would leave the band and the
    loss would be 0."""
    seqs = recorded["sequences"]
    data = [datum_of(seqs[0], advantage=1.0), datum_of(seqs[1], advantage=-0.5)]
    out = run.run(
        "forward_backward", forward_backward_input={"data": data, "loss_fn": "stable_reinforce"}
    )
    assert out["metrics"]["loss:sum"] == pytest.approx(-(4 * 1.0) + 4 * 0.5, abs=1e-4)
    ob = len(PROMPT) - 1
    for output, seq in zip(out["loss_fn_outputs"], seqs, strict=True):
        np.testing.assert_allclose(output["logprobs"]["data"][ob:], seq["logprobs"], atol=1e-4)
    # metered as training, like every forward_backward: each datum's tokens, once
    session = alice.post("get_info", {"model_id": run.id}).json()["session_id"]
    lines = alice.get(f"sessions/{session}/usage").json()["lines"]
    usage = {line["meter"]: line["quantity"] for line in lines}
    assert usage["train_tokens"] == 2 * (len(PROMPT) + 3)


def test_provenance_on_another_loss_is_checked_and_trains_as_sent(alice, runtime, run, recorded):
    seqs = recorded["sequences"]
    data = [datum_of(s) for s in seqs]
    out = run.run(
        "forward_backward", forward_backward_input={"data": data, "loss_fn": "importance_sampling"}
    )
    assert out["metrics"]["loss:sum"] != 0
    op = Operation.objects.filter(model_id=run.id, kind="forward_backward").get()
    assert "recorded" not in op.payload  # the client's logprobs are what the loss reads
    # a forward with provenance is checked too
    bad = datum_of(seqs[0])
    bad["model_input"]["chunks"][0]["tokens"][0] += 1
    r = run.submit("forward", forward_input={"data": [bad], "loss_fn": "cross_entropy"})
    assert r.status_code == 400 and "model_input_spans[0]" in r.json()["field"]


def _refused(run: ModelRun, runtime, data: list[dict], loss_fn: str = "stable_reinforce"):
    """Submit; the answer, after checking that the refusal took its seq_id and the model goes on."""
    r = run.submit("forward_backward", forward_backward_input={"data": data, "loss_fn": loss_fn})
    failed = Operation.objects.get(model_id=run.id, seq_id=run.seq)
    assert failed.status == Operation.Status.FAILED and failed.error.startswith("refused")
    ok = run.run("optim_step", adam_params={"learning_rate": 1e-3})
    assert "error" not in ok, ok
    return r


def _mangled(seq: dict, change) -> dict:
    datum = datum_of(seq)
    change(datum)
    return datum


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        (
            lambda d: d["model_input"]["chunks"][0]["tokens"].__setitem__(6, 1),
            "forward_backward_input.data[1].model_input_spans[1]",
            "position 6",
        ),
        (
            lambda d: d["loss_fn_inputs"]["target_tokens"]["data"].__setitem__(-1, 3),
            "forward_backward_input.data[1].loss_fn_input_spans[1]",
            "target_tokens differ",
        ),
        (
            lambda d: d["loss_fn_input_spans"][0].update(offset=2),
            "forward_backward_input.data[1].loss_fn_input_spans[0]",
            "runs past the recorded prompt",
        ),
        (
            lambda d: d["model_input_spans"][1].update(offset=3, length=3),
            "forward_backward_input.data[1].model_input_spans[1]",
            "runs past the recorded sampled tokens",
        ),
        (
            lambda d: d["model_input_spans"][0].update(length=4),
            "forward_backward_input.data[1]",
            "must tile it exactly",
        ),
    ],
    ids=["input-token", "sampled-target", "prompt-offset", "sampled-length", "tiling"],
)
def test_each_mismatch_is_a_400_naming_datum_and_span(run, runtime, recorded, change, field, words):
    seqs = recorded["sequences"]
    r = _refused(run, runtime, [datum_of(seqs[0]), _mangled(seqs[1], change)])
    assert r.status_code == 400, r.content
    assert r.json()["field"].startswith(field), r.json()
    assert words in r.json()["detail"]


def test_targets_under_prompt_spans_are_not_checked(run, recorded):
    datum = datum_of(recorded["sequences"][0])
    datum["loss_fn_inputs"]["target_tokens"]["data"][0] = 77  # a padded prompt target
    r = run.submit(
        "forward_backward", forward_backward_input={"data": [datum], "loss_fn": "stable_reinforce"}
    )
    assert r.status_code == 200, r.content


def test_stable_reinforce_without_provenance_says_so(run, runtime, recorded):
    seqs = recorded["sequences"]
    r = _refused(run, runtime, [datum_of(seqs[0]), datum_of(seqs[1], spans=False)])
    assert r.status_code == 400
    assert r.json()["field"] == "forward_backward_input.data[1]"
    assert "has no provenance" in r.json()["detail"] and "stable_reinforce" in r.json()["detail"]


def _unknown_answer(run, runtime, seq: dict, sequence_id: str) -> tuple[int, str]:
    datum = datum_of(seq)
    for span in (*datum["model_input_spans"], *datum["loss_fn_input_spans"]):
        span["sequence_id"] = sequence_id
    r = _refused(run, runtime, [datum])
    return r.status_code, r.json()["detail"].replace(repr(sequence_id), "<id>")


def test_other_sessions_tenants_and_unrecorded_ids_answer_as_unknown_ones(
    alice, bob, charlie, runtime, run, recorded
):
    seq = recorded["sequences"][0]
    # the same tenant's other session (bob's), its recorded sample
    bobs = ModelRun(bob, runtime, open_session(bob), seq=0)
    bobs_id = sample(bob, runtime, sampler_of(bob, bobs), 0)["sequences"][0]["sequence_id"]
    # another tenant's
    charlies = ModelRun(charlie, runtime, open_session(charlie), seq=0)
    charlies_id = sample(charlie, runtime, sampler_of(charlie, charlies), 0)["sequences"][0][
        "sequence_id"
    ]
    # alice's own session, sampled without recording
    unrecorded = sample(alice, runtime, sampler_of(alice, run, seq=1), 0, record=False)
    answers = {
        name: _unknown_answer(run, runtime, seq, sequence_id)
        for name, sequence_id in {
            "never": "req-00000000000000000000:0",
            "bob": bobs_id,
            "charlie": charlies_id,
            "unrecorded": unrecorded["sequences"][0]["sequence_id"],
            "past-the-last": seq["sequence_id"].rsplit(":", 1)[0] + ":2",
        }.items()
    }
    assert len(set(answers.values())) == 1, answers
    status, detail = answers["never"]
    assert status == 404 and "not a recorded sequence of this session" in detail
    # and charlie citing alice's sequence gets the same
    assert _unknown_answer(charlies, runtime, seq, seq["sequence_id"]) == (status, detail)


def test_a_day_after_the_last_use_a_sequence_is_refused(run, runtime, recorded, monkeypatch):
    used, unused = recorded["sequences"]
    start = timezone.now()

    def at(hours: float) -> None:
        monkeypatch.setattr(timezone, "now", lambda: start + timedelta(hours=hours))

    def cite(seq: dict) -> int:
        r = run.submit(
            "forward_backward",
            forward_backward_input={"data": [datum_of(seq)], "loss_fn": "stable_reinforce"},
        )
        return r.status_code

    at(23)
    assert cite(used) == 200  # within the day: taken, and its day starts again
    at(25)
    assert cite(used) == 200
    assert cite(unused) == 404  # a day without a use: gone
    at(49.5)
    assert cite(used) == 404  # more than a day after its last use
    assert recordings_expire() == 1  # the janitor's sweep
    assert not RecordedSample.objects.exists()


def test_the_janitor_sweeps_recordings_of_ended_sessions(alice, runtime, run, recorded):
    RecordedSample.objects.update(
        session=Session.objects.create(tenant=alice.tenant, state="stopped")
    )
    assert sweep(push_billing=False)["expired_recordings"] == 1


def test_the_quota_bounds_recorded_bytes(alice, runtime, run):
    quota_set(tenant=alice.tenant, recorded_bytes=10)
    sampler = sampler_of(alice, run)
    sample(alice, runtime, sampler, 0)  # under the limit when submitted
    r = alice.post(
        "asample",
        {
            "sampling_session_id": sampler,
            "seq_id": 1,
            "prompt": {"chunks": [{"tokens": PROMPT}]},
            "sampling_params": {"max_tokens": 2},
            "record_stability_info": True,
        },
    )
    assert r.status_code == 429, r.content
    assert r.json()["code"] == "quota_exceeded" and "10 bytes" in r.json()["detail"]
    assert r.json()["field"] == "record_stability_info"
    sample(alice, runtime, sampler, 2, record=False)  # unrecorded sampling goes on


def test_recordings_go_with_their_session(alice, runtime, run, recorded):
    session = alice.post("get_info", {"model_id": run.id}).json()["session_id"]
    assert RecordedSample.objects.filter(session_id=session).exists()
    assert alice.post(f"sessions/{session}/stop").status_code == 200
    assert not RecordedSample.objects.filter(session_id=session).exists()


def test_protobuf_spans_are_read_and_checked(alice, runtime, run, recorded):
    from tests.controlplane.api.test_protobuf_wire import post_proto

    seqs = recorded["sequences"]
    batch = ForwardBackwardInput.model_validate(
        {"data": [datum_of(s) for s in seqs], "loss_fn": "stable_reinforce"}
    )
    r = post_proto(alice, encode_forward_backward(run.id, 1, batch))
    assert r.status_code == 200, r.content
    op = Operation.objects.get(pk=r.json()["request_id"])
    assert op.payload["forward_backward_input"]["data"][1]["loss_fn_input_spans"][1] == {
        "type": "sampled_tokens",
        "sequence_id": seqs[1]["sequence_id"],
        "offset": 0,
        "length": 4,
    }
    assert len(op.payload["recorded"]["datums"]) == 2
    bad = batch.model_copy(
        update={"data": [batch.data[0].model_copy(update={"loss_fn_input_spans": None})]}
    )
    r = post_proto(alice, encode_forward_backward(run.id, 2, bad))
    assert r.status_code == 400 and r.json()["field"] == "forward_backward_input.data[0]"
    assert TINY  # the model these runs train


def test_a_request_cites_a_bounded_number_of_sequences(run, runtime, recorded, monkeypatch):
    from controlplane.training_sessions.services import provenance

    monkeypatch.setattr(provenance, "MAX_CITED", 1)
    r = _refused(run, runtime, [datum_of(s) for s in recorded["sequences"]])
    assert r.status_code == 400 and r.json()["field"] == "forward_backward_input.data"
    assert "cite 2 sequences; at most 1" in r.json()["detail"]
