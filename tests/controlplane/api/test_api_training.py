"""The wire API end to end in process: sessions, ordered idempotent operations, checkpoints,
sampling, stopping; charlie (another tenant) sees none of it."""

from __future__ import annotations

import pytest

from controlplane.training_sessions.models import Operation
from tests.support.tiny_worker import TINY
from tests.support.wire import create_model, datum, fwdbwd, open_session, result

pytestmark = pytest.mark.django_db


def test_training_flow_checkpoints_sampling_and_stop(alice, bob, charlie, runtime) -> None:
    sid = open_session(alice)
    mid = create_model(alice, runtime, sid)
    fb = alice.post("forward_backward", fwdbwd(mid, 1, [datum([1, 2, 3, 4]), datum([9, 8])])).json()
    opt = alice.post(
        "optim_step", {"model_id": mid, "seq_id": 2, "adam_params": {"learning_rate": 0.01}}
    ).json()
    out = result(alice, runtime, fb)
    assert out["metrics"]["tokens:sum"] == 6.0 and len(out["loss_fn_outputs"]) == 2
    assert result(alice, runtime, opt)["metrics"]["step:max"] == 1.0

    saved = result(
        alice,
        runtime,
        alice.post("save_weights", {"model_id": mid, "seq_id": 3, "path": "s1"}).json(),
    )
    assert saved["path"] == f"tinker://{mid}/weights/s1"
    info = bob.post("weights_info", {"tinker_path": saved["path"]}).json()  # bob shares the tenant
    assert info["base_model"] == TINY and info["lora_rank"] == 4
    ckpts = alice.get(f"training_runs/{mid}/checkpoints").json()["checkpoints"]
    assert [c["checkpoint_id"] for c in ckpts] == ["weights/s1"] and ckpts[0]["size_bytes"] > 0
    assert ckpts[0]["base_model"] == TINY  # tinker 0.39's Checkpoint.base_model

    eph = result(
        alice,
        runtime,
        alice.post(
            "save_weights_for_sampler", {"model_id": mid, "seq_id": 4, "sampling_session_seq_id": 0}
        ).json(),
    )
    assert eph["path"] is None
    sample = {
        "sampling_session_id": eph["sampling_session_id"],
        "seq_id": 1,
        "num_samples": 3,
        "prompt": {"chunks": [{"tokens": [5, 6]}]},
        "sampling_params": {"max_tokens": 4, "seed": 3, "stop": []},
    }
    res = result(alice, runtime, alice.post("asample", sample).json())
    assert [len(s["tokens"]) for s in res["sequences"]] == [4, 4, 4]

    # resume in a new model from the saved state
    mid2 = create_model(alice, runtime, sid, seq=1)
    loaded = result(
        alice,
        runtime,
        alice.post(
            "load_weights",
            {"model_id": mid2, "seq_id": 1, "path": saved["path"], "optimizer": True},
        ).json(),
    )
    assert loaded["path"] == saved["path"]

    # charlie sees nothing of it
    assert charlie.post("forward_backward", fwdbwd(mid, 5, [datum([1])])).status_code == 404
    assert charlie.post("retrieve_future", {"request_id": fb["request_id"]}).status_code == 404
    assert charlie.post("weights_info", {"tinker_path": saved["path"]}).status_code == 404
    assert charlie.get(f"training_runs/{mid}").status_code == 404
    assert charlie.get(f"sessions/{sid}").status_code == 404
    assert charlie.post("session_heartbeat", {"session_id": sid}).status_code == 404
    assert charlie.post("get_info", {"model_id": mid}).status_code == 404
    assert charlie.post("asample", {**sample, "seq_id": 2}).status_code == 404
    assert (
        charlie.post(
            "load_weights",
            {"model_id": mid2, "seq_id": 2, "path": saved["path"], "optimizer": False},
        ).status_code
        == 404
    )
    assert charlie.get("sessions").json()["sessions"] == []

    stopped = alice.post(f"sessions/{sid}/stop").json()
    assert stopped["state"] == "stopping"
    runtime.drain()
    assert alice.get(f"sessions/{sid}").json()["state"] == "stopped"
    assert not runtime.host.has_adapter(mid)
    after = alice.post("forward_backward", fwdbwd(mid, 5, [datum([1])]))
    assert after.status_code == 409 and "stopped" in after.json()["detail"]
    assert alice.post("session_heartbeat", {"session_id": sid}).status_code == 410


def test_out_of_order_and_duplicate_requests_run_once_in_seq_order(alice, runtime) -> None:
    sid = open_session(alice)
    mid = create_model(alice, runtime, sid)
    bodies = {
        1: fwdbwd(mid, 1, [datum([1, 2, 3])]),
        2: {"model_id": mid, "seq_id": 2, "adam_params": {"learning_rate": 0.01}},
        3: fwdbwd(mid, 3, [datum([4, 5])]),
    }
    paths = {1: "forward_backward", 2: "optim_step", 3: "forward_backward"}
    futures = {}
    for seq in (3, 2, 3, 1, 2, 1):  # arrival order, with retries
        r = alice.post(paths[seq], bodies[seq])
        assert r.status_code == 200
        assert futures.setdefault(seq, r.json()) == r.json()  # a retry gets the same future
    conflict = alice.post("forward_backward", fwdbwd(mid, 1, [datum([7])]))
    assert conflict.status_code == 409 and conflict.json()["field"] == "seq_id"
    runtime.drain()
    ops = list(Operation.objects.filter(model_id=mid).order_by("started_at"))
    assert [op.seq_id for op in ops] == [0, 1, 2, 3]
    assert all(op.status == "done" for op in ops)
    assert Operation.objects.filter(model_id=mid).count() == 4


def test_waiting_for_a_missing_seq_id(alice, runtime) -> None:
    sid = open_session(alice)
    mid = create_model(alice, runtime, sid)
    late = alice.post("forward_backward", fwdbwd(mid, 2, [datum([1, 2])])).json()
    runtime.drain()
    pending = alice.post("retrieve_future", {"request_id": late["request_id"]})
    assert pending.status_code == 408 and pending.json()["type"] == "try_again"
    alice.post("forward_backward", fwdbwd(mid, 1, [datum([3])]))
    assert "metrics" in result(alice, runtime, late)


def test_bad_operation_fails_with_user_category_and_session_stays_usable(alice, runtime) -> None:
    sid = open_session(alice)
    mid = create_model(alice, runtime, sid)
    # only the worker sees it (the shapes of the loss inputs against the input's length); a
    # token id past the vocabulary is refused on arrival (test_hostile_inputs)
    bad = alice.post("forward_backward", fwdbwd(mid, 1, [datum([1, 2, 3], targets=[1, 2])]))
    failed = result(alice, runtime, bad.json())
    assert failed["category"] == "user" and "data[0]" in failed["error"], failed
    ok = alice.post("forward_backward", fwdbwd(mid, 2, [datum([1, 2])])).json()
    assert "metrics" in result(alice, runtime, ok)


def test_worker_error_fails_with_server_category_and_session_stays_usable(
    alice, runtime, monkeypatch
) -> None:
    sid = open_session(alice)
    mid = create_model(alice, runtime, sid)
    real = runtime.host.forward_backward_many
    calls = {"n": 0}

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("device lost")
        return real(*args, **kwargs)

    monkeypatch.setattr(runtime.host, "forward_backward_many", flaky)
    first = result(
        alice, runtime, alice.post("forward_backward", fwdbwd(mid, 1, [datum([1, 2])])).json()
    )
    assert first["category"] == "server" and "device lost" in first["error"]
    second = result(
        alice, runtime, alice.post("forward_backward", fwdbwd(mid, 2, [datum([1, 2])])).json()
    )
    assert second["metrics"]["tokens:sum"] == 2.0


def test_sample_batches_several_requests_and_isolates_a_bad_one(alice, runtime) -> None:
    sid = open_session(alice)
    mid = create_model(alice, runtime, sid)
    sampler = alice.post(
        "create_sampling_session",
        {"session_id": sid, "sampling_session_seq_id": 0, "model_id": mid},
    ).json()
    base = alice.post(
        "create_sampling_session",
        {"session_id": sid, "sampling_session_seq_id": 1, "base_model": TINY},
    ).json()
    req = {
        "num_samples": 2,
        "prompt": {"chunks": [{"tokens": [5, 6]}]},
        "sampling_params": {"max_tokens": 3, "stop": []},
    }
    futs = [
        alice.post(
            "asample", {**req, "sampling_session_id": sampler["sampling_session_id"], "seq_id": i}
        ).json()
        for i in range(3)
    ]
    futs.append(
        alice.post(
            "asample", {**req, "sampling_session_id": base["sampling_session_id"], "seq_id": 0}
        ).json()
    )
    bad = alice.post(
        "asample",
        {
            **req,
            "sampling_session_id": base["sampling_session_id"],
            "seq_id": 1,
            "sampling_params": {"max_tokens": 3, "top_p": 0},
        },
    )  # refused at the door: the others are not touched
    assert bad.status_code == 400 and bad.json()["field"] == "sampling_params.top_p"
    too_long = alice.post(
        "asample",
        {
            **req,
            "sampling_session_id": base["sampling_session_id"],
            "seq_id": 2,
            "sampling_params": {"max_tokens": 10**6},
        },
    ).json()  # only the worker knows the context length: it fails there, as the user's error
    runtime.drain()
    for f in futs:
        assert len(result(alice, runtime, f)["sequences"]) == 2
    failed = result(alice, runtime, too_long)
    assert failed["category"] == "user" and "max_tokens" in failed["error"]


def test_a_request_refused_on_arrival_does_not_block_later_ones(alice, runtime) -> None:
    sid = open_session(alice)
    mid = create_model(alice, runtime, sid)
    later = alice.post("forward_backward", fwdbwd(mid, 2, [datum([1, 2])])).json()
    refused = alice.post("save_weights", {"model_id": mid, "seq_id": 1, "path": "bad name!"})
    assert refused.status_code == 400 and refused.json()["field"] == "path"
    assert "metrics" in result(alice, runtime, later)
    mistyped = alice.post(
        "forward_backward", {"model_id": mid, "seq_id": 3, "forward_backward_input": {"data": "x"}}
    )
    assert mistyped.status_code == 400
    assert "metrics" in result(
        alice, runtime, alice.post("forward_backward", fwdbwd(mid, 4, [datum([1])])).json()
    )


def test_a_seq_id_that_never_arrives_times_out(alice, runtime) -> None:
    from controlplane.operations import ordering

    sid = open_session(alice)
    mid = create_model(alice, runtime, sid)
    later = alice.post("forward_backward", fwdbwd(mid, 2, [datum([1, 2])])).json()
    runtime.drain()
    assert ordering.settle_gaps(worker=runtime.worker, gap_seconds=3600) == 0  # still waiting
    assert ordering.settle_gaps(worker=runtime.worker, gap_seconds=0) == 1
    assert "metrics" in result(alice, runtime, later)
    missing = Operation.objects.get(model_id=mid, seq_id=1)
    assert missing.status == "failed" and "never arrived" in missing.error
    late = alice.post("forward_backward", fwdbwd(mid, 1, [datum([3])]))
    assert late.status_code == 409


def test_old_sampler_weights_leave_the_host_and_come_back_on_use(alice, runtime) -> None:
    runtime.samplers.limit = 2
    sid = open_session(alice)
    mid = create_model(alice, runtime, sid)
    req = {
        "num_samples": 1,
        "prompt": {"chunks": [{"tokens": [5, 6]}]},
        "sampling_params": {"max_tokens": 2, "stop": [], "seed": 1},
    }
    samplers, first_answers = [], []
    for step in range(4):  # an RL loop: new sampler weights every step
        saved = result(
            alice,
            runtime,
            alice.post(
                "save_weights_for_sampler",
                {"model_id": mid, "seq_id": step + 1, "sampling_session_seq_id": step},
            ).json(),
        )
        samplers.append(saved["sampling_session_id"])
        first_answers.append(
            result(
                alice,
                runtime,
                alice.post(
                    "asample", {**req, "sampling_session_id": samplers[-1], "seq_id": 1}
                ).json(),
            )
        )
    loaded = [s for s in samplers if runtime.host.has_adapter(f"sampler:{s}")]
    assert loaded == samplers[-2:]
    again = result(
        alice,
        runtime,
        alice.post("asample", {**req, "sampling_session_id": samplers[0], "seq_id": 2}).json(),
    )

    def unnamed(seqs: list[dict]) -> list[dict]:  # each request's sequences have ids of their own
        return [{k: v for k, v in s.items() if k != "sequence_id"} for s in seqs]

    # reloaded from storage, same weights
    assert unnamed(again["sequences"]) == unnamed(first_answers[0]["sequences"])


def test_a_training_steps_refusals_come_in_order(alice, bob, charlie, runtime) -> None:
    """The caller's decision first (403), then the body (400), then the model (404); each
    refusal of an allowed request is in the audit log as failed, saying why."""
    from controlplane.audit.models import AuditEvent

    mid = create_model(bob, runtime, open_session(bob))
    mistyped = fwdbwd(mid, 1, "x")
    deny = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Deny", "Action": "sessions:*", "Resource": "*"}],
    }
    policy = "/api/v1/iam/users/bob@example.com/policies/freeze"
    assert alice.client.put(policy, {"document": deny}, format="json").status_code == 200
    for body in (mistyped, [mistyped], fwdbwd("model-nope", 1, [datum([1])])):
        r = bob.post("forward_backward", body)
        assert r.status_code == 403 and r.json()["code"] == "access_denied", r.content
    assert alice.client.delete(policy).status_code == 204

    r = bob.post("forward_backward", mistyped)
    assert r.status_code == 400 and r.json()["field"] == "forward_backward_input.data"
    r = bob.post("optim_step", [{"model_id": mid}])
    assert r.status_code == 400 and r.json()["code"] == "parse_error"
    assert r.json()["detail"] == "the request body must be a JSON object"
    r = bob.post("forward_backward", fwdbwd("model-nope", 1, [datum([1])]))
    assert r.status_code == 404 and r.json()["field"] == "model_id"
    r = charlie.post("forward_backward", fwdbwd(mid, 2, [datum([1])]))
    assert r.status_code == 404 and r.json()["field"] == "model_id"

    failed = AuditEvent.objects.filter(tenant=bob.tenant, allowed=True, outcome="failed")
    errors = [e.error for e in failed.order_by("id")]
    assert errors[0].startswith("forward_backward_input.data"), errors
    assert "the request body must be a JSON object" in errors
    assert any("model-nope" in e for e in errors), errors
    # the mistyped request took its seq_id as a failed operation; the model goes on after it
    assert Operation.objects.get(model_id=mid, seq_id=1).status == Operation.Status.FAILED
    r = bob.post("forward_backward", fwdbwd(mid, 2, [datum([1, 2])]))
    assert r.status_code == 200 and "metrics" in result(bob, runtime, r.json())


def test_stable_reinforce_without_provenance_is_refused_naming_the_datum(
    alice, charlie, runtime
) -> None:
    """The engine computes stable_reinforce from what sampling recorded; a datum that names no
    recorded sequence is a 400 that says so, takes its seq_id, and the model goes on."""
    mid = create_model(alice, runtime, open_session(alice))
    body = fwdbwd(mid, 1, [datum([1, 2, 3])], loss_fn="stable_reinforce")
    body["forward_backward_input"]["data"][0]["loss_fn_inputs"] = {
        "target_tokens": {"data": [2, 3, 4], "dtype": "int64"},
        "logprobs": {"data": [-1.0, -1.0, -1.0], "dtype": "float32"},
        "advantages": {"data": [1.0, 1.0, 1.0], "dtype": "float32"},
    }
    r = charlie.post("forward_backward", fwdbwd(mid, 1, [datum([1, 2])]))
    assert r.status_code == 404 and r.json()["field"] == "model_id"
    r = alice.post("forward_backward", body)
    assert r.status_code == 400, r.content
    assert r.json()["field"] == "forward_backward_input.data[0]"
    assert "needs provenance" in r.json()["detail"]
    assert "record_stability_info" in r.json()["detail"]
    assert Operation.objects.get(model_id=mid, seq_id=1).status == Operation.Status.FAILED
    body["seq_id"] = 2
    body["forward_backward_input"]["loss_fn_config"] = {"kl_coeff": -0.5}
    r = alice.post("forward_backward", body)  # its config is refused first, naming the key
    assert r.status_code == 400 and r.json()["field"] == "forward_backward_input.loss_fn_config"
    assert "kl_coeff: -0.5 is not ≥ 0" in r.json()["detail"]
    r = alice.post("forward_backward", fwdbwd(mid, 3, [datum([1, 2])]))
    assert "metrics" in result(alice, runtime, r.json())
