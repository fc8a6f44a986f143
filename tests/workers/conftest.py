"""Tests of the worker process around the engine (its runtime, telemetry, wake-ups, threads,
packed passes and the embedded broker), with the control-plane tests' people and an in-process
runtime with room for many sessions, plus dora, the owner of a third tenant."""

import pytest

from tests import people as people_
from tests.controlplane.conftest import (  # noqa: F401
    TINY,
    _settings,
    calling,
    people,
    tiny_host_factory,
)


@pytest.fixture
def runtime(db, tiny_host_factory):  # noqa: F811
    from workers.runtime import WorkerRuntime, WorkerSettings

    return WorkerRuntime(
        # snapshots are taken where a test asks for them
        WorkerSettings(
            name="test0",
            base_model=TINY,
            capacity=16,
            snapshot_every_steps=0,
            snapshot_every_seconds=0,
        ),
        host=tiny_host_factory(),
        heartbeat=False,
    )


@pytest.fixture
def dora(people):  # noqa: F811
    """The owner of a third tenant."""
    return calling(people_.owner("dora", "dorado"))
