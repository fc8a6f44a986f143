"""Packed calls when the database fails around them: a claim the database lost, or results it
could not take, touch only the operations concerned; each model ends exactly as if every step
had run once, alone, and is billed once."""

from __future__ import annotations

import pytest
import torch
from django.db import OperationalError

from controlplane.metering.models import UsageRecord
from controlplane.operations import complete
from controlplane.training_sessions.models import Operation
from tests.support.wire import ModelRun, datum, open_session, result
from workers import passes

from .test_packed_passes import ADAM, _adapter, _calls, _grew

pytestmark = pytest.mark.django_db(transaction=True)


def _data(i: int) -> dict:
    return {"data": [datum([(5 * i + j) % 250 + 1 for j in range(6)])], "loss_fn": "cross_entropy"}


def _submit_steps(runs: list[ModelRun]) -> list[tuple[str, str]]:
    ids = []
    for i, run in enumerate(runs):
        fb = run.submit("forward_backward", forward_backward_input=_data(i)).json()
        step = run.submit("optim_step", adam_params=ADAM).json()
        ids.append((fb["request_id"], step["request_id"]))
    return ids


def _unharmed(runtime, owners) -> list[dict]:
    """Each model after the same steps, run alone with nothing going wrong (same seeds)."""
    out = []
    for i, person in enumerate(owners):
        run = ModelRun(person, runtime, open_session(person))
        run.run("forward_backward", forward_backward_input=_data(i))
        run.run("optim_step", adam_params=ADAM)
        out.append(_adapter(runtime, run.id))
    return out


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=1e-5, rtol=1e-5)


def test_a_lost_claim_in_a_packed_call_reruns_that_model_alone(
    alice, charlie, dora, runtime, monkeypatch
) -> None:
    owners = [alice, charlie, dora]
    runs = [ModelRun(p, runtime, open_session(p)) for p in owners]
    ids = _submit_steps(runs)
    real = passes.run_packed
    lost = ids[0][0]  # alice's forward_backward
    calls: list[int] = []  # how many operations each forward_backward call ran

    def crash_after_running(host, kind, items):
        outcomes = real(host, kind, items)
        if kind == "forward_backward":
            calls.append(len(items))
            if len(calls) == 1:
                # the database came back without the claim: the step is pending again
                Operation.objects.filter(pk=lost).update(status="pending", started_at=None)
        return outcomes

    monkeypatch.setattr(passes, "run_packed", crash_after_running)
    runtime.drain()
    assert calls == [3, 1]  # the three together, then the lost one alone (a pack of one)
    for run, (fb, step) in zip(runs, ids, strict=True):
        for request_id in (fb, step):
            assert "metrics" in result(run.person, runtime, {"request_id": request_id})
    for run, expected in zip(runs, _unharmed(runtime, owners), strict=True):
        _same(_adapter(runtime, run.id), expected)
    assert UsageRecord.objects.filter(operation_id=lost).count() == 1


def test_results_the_database_could_not_take_run_again_once(
    alice, charlie, dora, runtime, monkeypatch
) -> None:
    """The first completion of a packed call fails (the database went away): none of the
    call's operations is recorded; once the database answers, each model is restored and its
    step runs again, ending exactly as if it had run once."""
    owners = [alice, charlie, dora]
    runs = [ModelRun(p, runtime, open_session(p)) for p in owners]
    ids = _submit_steps(runs)
    real = complete.complete

    def gone(op, result, fence):
        monkeypatch.setattr(complete, "complete", real)
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(complete, "complete", gone)
    before = _calls(runtime)
    with pytest.raises(OperationalError):
        runtime.drain()
    assert _grew(before, _calls(runtime)) == {"forward_backward_many": 1}
    statuses = Operation.objects.filter(pk__in=[fb for fb, _ in ids]).values_list(
        "status", flat=True
    )
    assert set(statuses) == {"running"}  # ran, not recorded
    assert not any(runtime.host.has_adapter(run.id) for run in runs)  # their state no longer counts
    runtime.drain()  # the database answers again
    for run, (fb, step) in zip(runs, ids, strict=True):
        for request_id in (fb, step):
            assert "metrics" in result(run.person, runtime, {"request_id": request_id})
        assert UsageRecord.objects.filter(operation_id=fb, meter="train_tokens").count() == 1
    for run, expected in zip(runs, _unharmed(runtime, owners), strict=True):
        _same(_adapter(runtime, run.id), expected)
