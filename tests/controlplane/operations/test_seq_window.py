"""A model's seq_id window and its gaps: a request too far ahead is refused and takes nothing; a
gap, however long, is settled as one row off the worker's loop of operations, so no tenant can
stall a shared worker; charlie (another tenant) sees none of it."""

from __future__ import annotations

import time

import pytest

from controlplane.operations import ordering
from controlplane.training_sessions.models import Operation, TrainingModel
from tests.support.wire import create_model, datum, fwdbwd, open_session, result

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _window(settings):
    settings.SEQ_WINDOW = 1000


def test_a_request_beyond_the_window_is_refused_and_takes_no_seq_id(alice, charlie, runtime):
    mid = create_model(alice, runtime, open_session(alice))
    for seq in (1001, 1002, 2**31 - 1):
        r = alice.post("forward_backward", fwdbwd(mid, seq, [datum([1, 2])]))
        assert r.status_code == 400, r.content
        body = r.json()
        assert (body["code"], body["field"]) == ("seq_id_out_of_window", "seq_id")
        assert "at most 1000 ahead" in body["detail"]
    # a refusal for another reason beyond the window takes nothing either
    bad = alice.post("save_weights", {"model_id": mid, "seq_id": 5000, "path": "bad name!"})
    assert bad.status_code == 400
    assert not Operation.objects.filter(model_id=mid, seq_id__gt=0).exists()
    last = alice.post("forward_backward", fwdbwd(mid, 1000, [datum([1, 2])]))  # the window's edge
    assert last.status_code == 200, last.content
    first = alice.post("forward_backward", fwdbwd(mid, 1, [datum([3, 4])])).json()
    assert "metrics" in result(alice, runtime, first)
    assert charlie.post("forward_backward", fwdbwd(mid, 2, [datum([1])])).status_code == 404


def test_a_long_gap_is_settled_as_one_row_in_one_go(alice, runtime):
    """A refused request at the far end of the window, then stop: the worker records the gap in
    one row at its next heartbeat, not a row per seq_id in its loop."""
    mid = create_model(alice, runtime, open_session(alice))
    refused = alice.post("save_weights", {"model_id": mid, "seq_id": 999, "path": "bad name!"})
    assert refused.status_code == 400
    unload = alice.post("unload_model", {"model_id": mid}).json()
    assert Operation.objects.get(pk=unload["request_id"]).seq_id == 1000
    assert runtime.drain() == 0  # nothing runnable, and the loop does not settle gaps
    started = time.perf_counter()
    assert ordering.settle_gaps(worker=runtime.worker, gap_seconds=0) == 1
    assert time.perf_counter() - started < 2.0
    missing = Operation.objects.get(model_id=mid, kind="missing")
    assert (missing.seq_id, ordering.missing_range(missing)) == (1, (1, 998))
    assert missing.status == "failed" and "seq_ids 1 to 998 never arrived" in missing.error
    assert TrainingModel.objects.get(pk=mid).next_seq == 999  # the refused one is stepped over
    assert result(alice, runtime, unload) == {"model_id": mid, "type": "unload_model"}
    assert Operation.objects.filter(model_id=mid).count() == 4  # create, missing, refused, unload
    late = alice.post("forward_backward", fwdbwd(mid, 500, [datum([1])]))
    assert late.status_code == 409  # behind the model: the range took it


def test_the_heartbeat_settles_gaps_and_the_loop_steps_over_refusals(alice, runtime, settings):
    settings.SEQ_GAP_SECONDS = 0
    mid = create_model(alice, runtime, open_session(alice))
    later = alice.post("forward_backward", fwdbwd(mid, 3, [datum([1, 2])])).json()
    runtime.drain()
    assert Operation.objects.get(pk=later["request_id"]).status == "pending"
    runtime.beat()  # the heartbeat records seq_ids 1-2 as missing
    assert "metrics" in result(alice, runtime, later)
    refused = alice.post("save_weights", {"model_id": mid, "seq_id": 4, "path": "bad name!"})
    assert refused.status_code == 400
    after = alice.post("forward_backward", fwdbwd(mid, 5, [datum([3])])).json()
    assert "metrics" in result(alice, runtime, after)  # drained at once, no heartbeat needed


def test_a_gap_inside_the_window_waits_while_the_model_waits_for_a_worker(alice, runtime):
    mid = create_model(alice, runtime, open_session(alice))
    alice.post("forward_backward", fwdbwd(mid, 10, [datum([1, 2])]))
    assert ordering.settle_gaps(worker=runtime.worker, gap_seconds=3600) == 0
    assert not Operation.objects.filter(model_id=mid, kind="missing").exists()
