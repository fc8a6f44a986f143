"""The embedded broker never hands a consumer a half-written message."""

from __future__ import annotations

import threading

from kombu import Connection

from controlplane.broker_fs import register
from controlplane.dispatch import broker_options


def test_messages_arrive_whole_while_the_consumer_polls(tmp_path) -> None:
    url = register()
    options = broker_options(url, tmp_path)
    sent = 400
    received: list[dict] = []
    done = threading.Event()

    def consume() -> None:
        with Connection(url, transport_options=options) as conn:
            queue = conn.SimpleQueue("gpu.test")
            while len(received) < sent:
                try:
                    received.append(queue.get(timeout=0.001).payload)
                except queue.Empty:
                    continue
            queue.close()
        done.set()

    reader = threading.Thread(target=consume)
    reader.start()
    with Connection(url, transport_options=options) as conn:
        queue = conn.SimpleQueue("gpu.test")
        for i in range(sent):
            queue.put({"n": i, "pad": "x" * 20000})  # big enough to be written in several parts
        queue.close()
    assert done.wait(60), f"only {len(received)} of {sent} arrived"
    reader.join()
    assert sorted(m["n"] for m in received) == list(range(sent))
    assert not list((tmp_path / "messages").glob(".partial-*"))
