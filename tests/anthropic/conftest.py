"""The control-plane tests' people (alice and bob share a tenant, charlie is another) and their
in-process worker on the tiny model, for the in-process tests of Anthropic's Messages face."""

from __future__ import annotations

from tests.controlplane import conftest as controlplane

_settings = controlplane._settings
people = controlplane.people
tiny_host_factory = controlplane.tiny_host_factory
runtime = controlplane.runtime
