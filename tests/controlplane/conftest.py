"""Control-plane tests run with the control plane's test settings; the three people as API
callers (``people``, ``alice``, ``bob``, ``charlie``) and the in-process ``runtime`` on the tiny
model come from ``tests/support/fixtures.py``."""

import pytest


@pytest.fixture(autouse=True)
def _settings(control_plane_settings):
    """Every test here runs with the control plane's test settings."""
