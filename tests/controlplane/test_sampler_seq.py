"""A sampler's ``sampling_session_seq_id`` is unique in its session: the same number with the same
request is a retry (the same sampler), with another request a 409, never someone else's sampler.
``get_info`` says where a client that attaches to a model's session continues."""

from __future__ import annotations

from tests.support.tiny_worker import TINY
from tests.support.wire import create_model, datum, fwdbwd, open_session, result


def _ephemeral(person, runtime, model_id: str, seq_id: int, sampler_seq: int):
    return person.post(
        "save_weights_for_sampler",
        {"model_id": model_id, "seq_id": seq_id, "sampling_session_seq_id": sampler_seq},
    )


def test_get_info_says_where_samplers_continue(alice, charlie, runtime) -> None:
    sid = open_session(alice)
    mid = create_model(alice, runtime, sid)
    assert alice.post("get_info", {"model_id": mid}).json()["next_sampling_session_seq_id"] == 0
    saved = result(alice, runtime, _ephemeral(alice, runtime, mid, 1, 0).json())
    assert saved["sampling_session_id"]
    opened = alice.post(
        "create_sampling_session",
        {"session_id": sid, "sampling_session_seq_id": 4, "base_model": TINY},
    )
    assert opened.status_code == 200, opened.content
    assert alice.post("get_info", {"model_id": mid}).json()["next_sampling_session_seq_id"] == 5
    assert charlie.post("get_info", {"model_id": mid}).status_code == 404


def test_a_pending_ephemeral_save_reserves_its_sampler_number(alice, runtime) -> None:
    sid = open_session(alice)
    mid = create_model(alice, runtime, sid)
    assert _ephemeral(alice, runtime, mid, 1, 0).status_code == 200  # not run yet
    info = alice.post("get_info", {"model_id": mid}).json()
    assert info["next_sampling_session_seq_id"] == 1


def test_the_same_sampler_number_for_new_weights_is_a_conflict(alice, runtime) -> None:
    sid = open_session(alice)
    mid = create_model(alice, runtime, sid)
    first = result(alice, runtime, _ephemeral(alice, runtime, mid, 1, 0).json())
    # a retry of the same request is the same sampler
    again = result(alice, runtime, _ephemeral(alice, runtime, mid, 1, 0).json())
    assert again["sampling_session_id"] == first["sampling_session_id"]

    # a second script on the model, counting samplers from 0 again, trains and saves: a 409
    result(alice, runtime, alice.post("forward_backward", fwdbwd(mid, 2, [datum([1, 2])])).json())
    clash = _ephemeral(alice, runtime, mid, 3, 0)
    assert clash.status_code == 409, clash.content
    body = clash.json()
    assert body["field"] == "sampling_session_seq_id" and "already used" in body["detail"]
    runtime.drain()  # nothing of it is left to run, and the worker is fine
    # the next free number works, and samples from the new weights
    fresh = result(alice, runtime, _ephemeral(alice, runtime, mid, 4, 1).json())
    assert fresh["sampling_session_id"] != first["sampling_session_id"]
    sample = {
        "sampling_session_id": fresh["sampling_session_id"],
        "seq_id": 1,
        "num_samples": 1,
        "prompt": {"chunks": [{"tokens": [5, 6]}]},
        "sampling_params": {"max_tokens": 2, "seed": 1, "stop": []},
    }
    assert len(result(alice, runtime, alice.post("asample", sample).json())["sequences"]) == 1


def test_create_sampling_session_with_a_used_number_and_another_source_is_a_conflict(
    alice, runtime
) -> None:
    sid = open_session(alice)
    mid = create_model(alice, runtime, sid)
    live = {"session_id": sid, "sampling_session_seq_id": 0, "model_id": mid}
    made = alice.post("create_sampling_session", live)
    assert made.status_code == 200
    assert alice.post("create_sampling_session", live).json() == made.json()  # a retry
    saved = result(
        alice,
        runtime,
        alice.post("save_weights_for_sampler", {"model_id": mid, "path": "p"}).json(),
    )
    other = {"session_id": sid, "sampling_session_seq_id": 0, "model_path": saved["path"]}
    clash = alice.post("create_sampling_session", other)
    assert clash.status_code == 409 and clash.json()["field"] == "sampling_session_seq_id"
    # an ephemeral save may not take a number an open sampler has
    assert _ephemeral(alice, runtime, mid, 2, 0).status_code == 409


def test_a_retried_ephemeral_save_with_a_new_sampler_number_is_the_same_save(
    alice, charlie, runtime
) -> None:
    """The tinker SDK (0.38) draws a new sampling_session_seq_id for each attempt of a save
    it retries (a timeout, a 5xx): the same seq_id is the same save, and its sampler keeps
    the number the first attempt took, before and after the save ran."""
    sid = open_session(alice)
    mid = create_model(alice, runtime, sid)
    first = _ephemeral(alice, runtime, mid, 1, 0)
    retried = _ephemeral(alice, runtime, mid, 1, 1)  # before it ran
    assert retried.status_code == 200, retried.content
    assert retried.json()["request_id"] == first.json()["request_id"]
    saved = result(alice, runtime, first.json())
    late = _ephemeral(alice, runtime, mid, 1, 2)  # after it ran
    assert late.status_code == 200, late.content
    assert result(alice, runtime, late.json()) == saved
    info = alice.post("get_info", {"model_id": mid}).json()
    assert info["next_sampling_session_seq_id"] == 1  # number 0, the first attempt's
    # a named save is no such thing: another path under the same seq_id is another request
    named = alice.post("save_weights_for_sampler", {"model_id": mid, "seq_id": 2, "path": "a"})
    assert named.status_code == 200
    clash = alice.post("save_weights_for_sampler", {"model_id": mid, "seq_id": 2, "path": "b"})
    assert clash.status_code == 409
    assert _ephemeral(charlie, runtime, mid, 3, 0).status_code == 404
