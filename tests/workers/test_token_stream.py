"""The worker sends the tokens of streaming operations on each one's channel as they are drawn,
gathered into notices under PostgreSQL's limit, and nothing for operations that do not stream;
what it sends reads back as exactly what was drawn, in order."""

from __future__ import annotations

import time

import psycopg
import pytest
from django.db import connection

from controlplane.operations import token_notices
from controlplane.pg_listen import connect_params
from workers.engine.sampler import SampledToken
from workers.token_stream import TokenPublisher

pytestmark = pytest.mark.django_db(transaction=True)


def test_notices_stay_under_the_limit_and_read_back_as_sent() -> None:
    top = [(t, -0.123456789 * t) for t in range(20)]
    entries = [
        (s, p, 1000 + p, -0.5 - p / 7, top if p % 2 else None) for s in range(2) for p in range(300)
    ]
    payloads = list(token_notices.notices(entries))
    assert len(payloads) > 1 and all(len(p.encode()) < 8000 for p in payloads)
    back = [e for p in payloads for e in token_notices.parse(p)]
    assert back == [(s, p, t, lp, tp) for s, p, t, lp, tp in entries]
    with pytest.raises(ValueError):
        token_notices.parse('{"not": "a list"}')


def heard(conn: psycopg.Connection, channels: set[str], until: int, timeout: float = 10):
    got: dict[str, list] = {c: [] for c in channels}
    deadline = time.monotonic() + timeout
    while sum(map(len, got.values())) < until and time.monotonic() < deadline:
        for note in conn.notifies(timeout=0.2):
            got[note.channel] += token_notices.parse(note.payload)
    return got


def test_only_streaming_operations_are_sent_each_on_its_channel(settings) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("tokens are sent with NOTIFY on PostgreSQL only")
    settings.NOTIFY_ON_COMPLETION = True  # committed at once: this test runs outside a transaction
    publisher = TokenPublisher(flush_seconds=0.05)
    ids = ["req-streams-a", "req-quiet", "req-streams-b"]
    payloads = [{"stream": True}, {}, {"stream": True}]
    assert publisher.sink(["req-quiet"], [{}]) is None  # nothing streams: no listener at all
    sink = publisher.sink(ids, payloads)
    assert sink is not None
    channels = {token_notices.channel(i) for i in ids}
    with psycopg.connect(autocommit=True, **connect_params()) as conn:
        for name in channels:
            conn.execute(f'LISTEN "{name}"')
        drawn = []
        for position in range(400):  # decoding steps: every operation's row draws a token
            step = [
                SampledToken(job, 0, position, 7 * position % 250, -0.25, None) for job in range(3)
            ]
            drawn.append(step)
            sink(step)
        publisher.batch_done()
        got = heard(conn, channels, until=800)
        publisher.close()
    assert got[token_notices.channel("req-quiet")] == []
    for job, request_id in ((0, "req-streams-a"), (2, "req-streams-b")):
        expected = [(0, p, step[job].token, -0.25, None) for p, step in enumerate(drawn)]
        assert got[token_notices.channel(request_id)] == expected
    assert 2 <= publisher.sent < 800  # gathered: far fewer notices than tokens
