"""The control-plane tests' people (alice and bob share a tenant, charlie is another) and their
in-process worker on the tiny model, for the in-process tests of Anthropic's Messages face."""

import pytest


@pytest.fixture(autouse=True)
def _settings(control_plane_settings):
    """Every test here runs with the control plane's test settings."""
