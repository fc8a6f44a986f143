"""A sample request is a sign of life of its session, written as a training step's is: at most
once every ``TOUCH_SECONDS``, not once per request (a busy sampler would otherwise update its
session's row with every sample)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from controlplane.operations.admission import TOUCH_SECONDS
from controlplane.training_sessions.models import Session
from tests.support.tiny_worker import TINY
from tests.support.wire import open_session

pytestmark = pytest.mark.django_db


def _sample(person, sampler_id: str) -> None:
    r = person.post(
        "asample",
        {
            "sampling_session_id": sampler_id,
            "num_samples": 1,
            "prompt": {"chunks": [{"type": "encoded_text", "tokens": [1, 2, 3]}]},
            "sampling_params": {"max_tokens": 2, "temperature": 0.0, "stop": []},
        },
    )
    assert r.status_code == 200, r.content


def _session_updates(queries) -> list[str]:
    return [
        q["sql"]
        for q in queries
        if q["sql"].startswith('UPDATE "training_sessions_session"')
        and "last_heartbeat_at" in q["sql"]
    ]


def test_a_sample_marks_its_session_alive_at_most_once_a_few_seconds(
    alice, charlie, runtime
) -> None:
    sid = open_session(alice)
    r = alice.post(
        "create_sampling_session",
        {"session_id": sid, "sampling_session_seq_id": 0, "base_model": TINY},
    )
    sampler_id = r.json()["sampling_session_id"]
    long_ago = timezone.now() - timedelta(seconds=TOUCH_SECONDS + 60)
    Session.objects.filter(pk=sid).update(last_heartbeat_at=long_ago)

    with CaptureQueriesContext(connection) as queries:
        _sample(alice, sampler_id)
    assert len(_session_updates(queries)) == 1
    beat = Session.objects.get(pk=sid).last_heartbeat_at
    assert beat > long_ago

    with CaptureQueriesContext(connection) as queries:  # just marked: not again
        _sample(alice, sampler_id)
    assert _session_updates(queries) == []
    assert Session.objects.get(pk=sid).last_heartbeat_at == beat

    stale = timezone.now() - timedelta(seconds=TOUCH_SECONDS + 1)
    Session.objects.filter(pk=sid).update(last_heartbeat_at=stale)
    _sample(alice, sampler_id)
    assert Session.objects.get(pk=sid).last_heartbeat_at > stale

    assert (
        charlie.post(
            "asample",
            {
                "sampling_session_id": sampler_id,
                "num_samples": 1,
                "prompt": {"chunks": [{"type": "encoded_text", "tokens": [1]}]},
                "sampling_params": {"max_tokens": 1, "stop": []},
            },
        ).status_code
        == 404
    )
