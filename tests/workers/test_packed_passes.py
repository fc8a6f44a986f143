"""A real worker runtime packing several tenants' sessions into one engine call per kind: each
session gets exactly what it gets alone (results, weights, usage), the calls are really
shared, a huge batch or a backlog of samples holds nobody back, and a bad operation fails
alone."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from prometheus_client import REGISTRY

from controlplane.metering.models import UsageRecord
from controlplane.training_sessions.models import Operation
from tests.support.tiny_worker import TINY
from tests.support.wire import ModelRun, datum, open_session, result
from workers.passes import Pass
from workers.scheduling import Scheduler

pytestmark = pytest.mark.django_db(transaction=True)

ADAM = {"learning_rate": 0.05}


def _data(i: int) -> dict:
    rows = [datum([(7 * i + 3 * k + j) % 250 + 1 for j in range(5 + i + k)]) for k in range(2)]
    return {"data": rows, "loss_fn": "cross_entropy"}


def _calls(runtime) -> dict:
    return dict(runtime.host.calls)


def _grew(before: dict, after: dict) -> dict:
    return {k: after.get(k, 0) - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}


def _adapter(runtime, model_id: str) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in runtime.host.pool.state_dict(model_id).items()}


def _answer(person, request_id: str) -> dict:
    r = person.post("retrieve_future", {"request_id": request_id})
    assert r.status_code == 200, r.content
    return r.json()


def _close(a: dict, b: dict) -> None:
    """Two forward_backward answers agree within float32 (1e-5)."""
    assert a["metrics"]["loss:sum"] == pytest.approx(b["metrics"]["loss:sum"], rel=1e-5, abs=1e-5)
    for x, y in zip(a["loss_fn_outputs"], b["loss_fn_outputs"], strict=True):
        for key in ("logprobs", "elementwise_loss"):
            assert x[key]["data"] == pytest.approx(y[key]["data"], abs=1e-5)


def _train_tokens(request_id: str) -> list[int]:
    rows = UsageRecord.objects.filter(operation_id=request_id, meter="train_tokens")
    return list(rows.values_list("quantity", flat=True))


def test_tenants_train_in_one_call_per_kind_each_as_if_alone(alice, charlie, dora, runtime):
    owners = [alice, alice, charlie, dora]  # four sessions, three tenants
    packed = [ModelRun(p, runtime, open_session(p)) for p in owners]
    alone = [ModelRun(p, runtime, open_session(p)) for p in owners]  # same seed: same start
    calls_metric = "loopwright_worker_engine_call_operations_sum"
    ops_before = REGISTRY.get_sample_value(calls_metric, {"kind": "forward_backward"}) or 0.0
    before = _calls(runtime)
    futures = []
    for i, run in enumerate(packed):
        fb = run.submit("forward_backward", forward_backward_input=_data(i)).json()
        step = run.submit("optim_step", adam_params=ADAM).json()
        futures.append((fb["request_id"], step["request_id"]))
    assert runtime.drain() == 8
    assert _grew(before, _calls(runtime)) == {"forward_backward_many": 1, "optim_step_many": 1}
    ops_after = REGISTRY.get_sample_value(calls_metric, {"kind": "forward_backward"})
    assert ops_after - ops_before == 4  # the worker's telemetry says so too
    for i, (run, ref, (fb_id, step_id)) in enumerate(zip(packed, alone, futures, strict=True)):
        expected = ref.run("forward_backward", forward_backward_input=_data(i))
        assert "metrics" in ref.run("optim_step", adam_params=ADAM)
        _close(_answer(run.person, fb_id), expected)
        assert "metrics" in _answer(run.person, step_id)
        ours, theirs = _adapter(runtime, run.id), _adapter(runtime, ref.id)
        assert ours.keys() == theirs.keys()
        for name in ours:
            torch.testing.assert_close(ours[name], theirs[name], atol=1e-5, rtol=1e-5)
        ref_fb = Operation.objects.filter(model_id=ref.id, kind="forward_backward").get()
        assert _train_tokens(fb_id) == _train_tokens(ref_fb.pk) == [sum(5 + i + k for k in (0, 1))]
    # nobody reads another tenant's results
    assert charlie.post("retrieve_future", {"request_id": futures[0][0]}).status_code == 404
    assert alice.post("retrieve_future", {"request_id": futures[2][0]}).status_code == 404


def _sample_body(sampler: str, seq: int, seed: int) -> dict:
    return {
        "sampling_session_id": sampler,
        "seq_id": seq,
        "num_samples": 2,
        "prompt": {"chunks": [{"type": "encoded_text", "tokens": [5, 6, 7]}]},
        "sampling_params": {"max_tokens": 5, "seed": seed, "stop": []},
    }


def _open_sampler(person, session: str, seq: int, **source) -> str:
    r = person.post(
        "create_sampling_session",
        {"session_id": session, "sampling_session_seq_id": seq, **source},
    )
    assert r.status_code == 200, r.content
    return r.json()["sampling_session_id"]


def test_live_saved_and_base_weights_sample_in_one_call_as_if_alone(alice, charlie, dora, runtime):
    alice_session, charlie_session = open_session(alice), open_session(charlie)
    trained = ModelRun(alice, runtime, alice_session)
    trained.run("forward_backward", forward_backward_input=_data(1))
    trained.run("optim_step", adam_params=ADAM)
    saved = trained.run("save_weights_for_sampler", path="w")
    live = ModelRun(charlie, runtime, charlie_session)
    live.run("forward_backward", forward_backward_input=_data(2))
    live.run("optim_step", adam_params=ADAM)
    samplers = [
        (alice, _open_sampler(alice, alice_session, 1, model_path=saved["path"])),
        (charlie, _open_sampler(charlie, charlie_session, 1, model_id=live.id)),
        (dora, _open_sampler(dora, open_session(dora), 0, base_model=TINY)),
    ]
    before = _calls(runtime)
    together = [
        (person, person.post("asample", _sample_body(sid, 1, seed=11 + n)).json()["request_id"])
        for n, (person, sid) in enumerate(samplers)
    ]
    assert runtime.drain() == 3
    assert _grew(before, _calls(runtime)) == {"sample_many": 1}
    for n, ((person, sid), (_, request_id)) in enumerate(zip(samplers, together, strict=True)):
        fut = person.post("asample", _sample_body(sid, 2, seed=11 + n)).json()
        alone = result(person, runtime, fut)  # drained on its own
        shared = _answer(person, request_id)
        assert [s["tokens"] for s in shared["sequences"]] == [
            s["tokens"] for s in alone["sequences"]
        ]
        for x, y in zip(shared["sequences"], alone["sequences"], strict=True):
            assert x["logprobs"] == pytest.approx(y["logprobs"], abs=1e-5)
    assert dora.post("retrieve_future", {"request_id": together[0][1]}).status_code == 404


def test_a_huge_batch_runs_alone_after_the_small_ones(alice, charlie, dora, runtime):
    """Over the budget, alice's batch gets a call of its own, after the pass's other calls,
    whichever tenant's turn it is to go first."""
    runtime.scheduler = Scheduler(budget=64)
    runs = {
        "huge": ModelRun(alice, runtime, open_session(alice)),
        "c": ModelRun(charlie, runtime, open_session(charlie)),
        "d": ModelRun(dora, runtime, open_session(dora)),
    }
    big = {"data": [datum(list(range(1, 61))) for _ in range(4)], "loss_fn": "cross_entropy"}
    for _round in range(3):  # the round-robin starts with another tenant each time
        before = _calls(runtime)
        ids = {
            "huge": runs["huge"].submit("forward_backward", forward_backward_input=big),
            "c": runs["c"].submit("forward_backward", forward_backward_input=_data(1)),
            "d": runs["d"].submit("forward_backward", forward_backward_input=_data(2)),
        }
        assert runtime.drain() == 3
        assert _grew(before, _calls(runtime)) == {"forward_backward_many": 2}
        done = {k: Operation.objects.get(pk=r.json()["request_id"]) for k, r in ids.items()}
        assert all(op.status == "done" for op in done.values())
        assert max(done["c"].finished_at, done["d"].finished_at) <= done["huge"].finished_at


def test_a_backlog_of_samples_does_not_starve_another_tenant(alice, dora, runtime):
    runtime.settings = dataclasses.replace(runtime.settings, pass_samples=4)
    flood = _open_sampler(alice, open_session(alice), 0, base_model=TINY)
    other = _open_sampler(dora, open_session(dora), 0, base_model=TINY)
    backlog = [
        alice.post("asample", _sample_body(flood, seq, seed=seq)).json()["request_id"]
        for seq in range(1, 7)
    ]
    late = dora.post("asample", _sample_body(other, 1, seed=1)).json()["request_id"]
    ran, _idle = Pass(runtime.pass_context()).run()  # one pass
    assert ran == 4
    assert Operation.objects.get(pk=late).status == "done"  # not behind alice's six
    statuses = [Operation.objects.get(pk=pk).status for pk in backlog]
    assert statuses == ["done"] * 3 + ["pending"] * 3
    runtime.drain()
    assert Operation.objects.filter(pk__in=backlog, status="done").count() == 6


def test_a_bad_operation_fails_alone(alice, charlie, dora, runtime):
    """In one call: alice's request is invalid (a user error), charlie's row cannot be read
    (a server error); dora's runs and equals her request alone."""
    runs = [ModelRun(p, runtime, open_session(p)) for p in (alice, charlie, dora)]
    reference = ModelRun(dora, runtime, open_session(dora))
    bad = {"data": [datum([1, 2, 3], targets=[1])], "loss_fn": "cross_entropy"}
    ids = [
        runs[0].submit("forward_backward", forward_backward_input=bad).json()["request_id"],
        runs[1].submit("forward_backward", forward_backward_input=_data(1)).json()["request_id"],
        runs[2].submit("forward_backward", forward_backward_input=_data(2)).json()["request_id"],
    ]
    Operation.objects.filter(pk=ids[1]).update(payload={"seq_id": 1})  # unreadable
    before = _calls(runtime)
    runtime.drain()
    assert _grew(before, _calls(runtime)) == {"forward_backward_many": 1}
    failed = Operation.objects.get(pk=ids[0])
    assert (failed.status, failed.error_category) == ("failed", "user")
    assert "target" in failed.error
    broken = Operation.objects.get(pk=ids[1])
    assert (broken.status, broken.error_category) == ("failed", "server")
    _close(
        _answer(dora, ids[2]), reference.run("forward_backward", forward_backward_input=_data(2))
    )
    # each model goes on: the next step of the failed ones runs
    for run in runs[:2]:
        assert "metrics" in run.run("forward_backward", forward_backward_input=_data(3))
