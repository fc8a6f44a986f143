"""The control-plane tests' people and in-process worker, for the in-process tests of the
SageMaker runtime face."""

from __future__ import annotations

from tests.controlplane import conftest as controlplane

_settings = controlplane._settings
people = controlplane.people
tiny_host_factory = controlplane.tiny_host_factory
runtime = controlplane.runtime
