"""Tests of the worker process around the engine (its runtime, telemetry, wake-ups, threads,
packed passes and the embedded broker), with the control-plane tests' people and an in-process
runtime with room for many sessions, plus dora, the owner of a third tenant."""

import pytest

from tests import people as people_
from tests.support.callers import calling
from tests.support.tiny_worker import tiny_runtime


@pytest.fixture(autouse=True)
def _settings(control_plane_settings):
    """Every test here runs with the control plane's test settings."""


@pytest.fixture
def runtime(db, tiny_host_factory):
    """The in-process runtime, with room for 16 models."""
    return tiny_runtime(tiny_host_factory(), capacity=16)


@pytest.fixture
def dora(people):
    """The owner of a third tenant."""
    return calling(people_.owner("dora", "dorado"))
