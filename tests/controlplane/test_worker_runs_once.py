"""A claim commits without waiting for a disk flush; if the database loses it (and the
completion) in a crash, the worker that ran the operation does not run it a second time."""

from __future__ import annotations

import pytest

from controlplane.training_sessions.models import Operation, TrainingModel

from .wire import ModelRun, datum, open_session

pytestmark = pytest.mark.django_db


def test_an_operation_the_database_forgot_is_not_run_twice(alice, runtime) -> None:
    run = ModelRun(alice, runtime, open_session(alice))
    body = {"forward_backward_input": {"data": [datum([1, 2, 3])], "loss_fn": "cross_entropy"}}
    first = run.run("forward_backward", **body)
    assert "loss:sum" in first["metrics"]
    op = Operation.objects.get(model_id=run.id, seq_id=run.seq)
    # the crash: the database comes back without the claim and the completion
    Operation.objects.filter(pk=op.pk).update(status=Operation.Status.PENDING, result=None)
    TrainingModel.objects.filter(pk=run.id).update(next_seq=run.seq)
    runtime.drain()
    op.refresh_from_db()
    assert op.status == Operation.Status.FAILED and op.error_category == "server"
    assert "not run twice" in op.error
    # the model goes on: the next request runs
    assert "loss:sum" in run.run("forward_backward", **body)["metrics"]
