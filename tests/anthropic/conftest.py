"""The in-process tests of Anthropic's Messages face: the three people as API callers (alice
and bob share a tenant, charlie is another) and the in-process worker on the tiny model
(``tests/support/fixtures.py``), with the control plane's test settings."""

import pytest


@pytest.fixture(autouse=True)
def _settings(control_plane_settings):
    """Every test here runs with the control plane's test settings."""
