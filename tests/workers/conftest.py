"""Tests of the worker process around the engine (its runtime, telemetry, wake-ups, threads and
the embedded broker), with the control-plane tests' people and in-process runtime."""

from tests.controlplane.conftest import (  # noqa: F401
    _settings,
    people,
    runtime,
    tiny_host_factory,
)
