"""Billing fixtures: the people of the control-plane tests and a Stripe stand-in per module."""

from __future__ import annotations

import pytest
from stripe._http_client import HTTPClient

from .stripe_server import API_KEY, StripeServer, StripeState


@pytest.fixture(autouse=True)
def _settings(control_plane_settings):
    """Every test here runs with the control plane's test settings."""


@pytest.fixture(scope="module")
def stripe_server():
    server = StripeServer().start()
    yield server
    server.stop()


@pytest.fixture
def stripe_api(settings, stripe_server, monkeypatch) -> StripeState:
    """Push on, against the stand-in (emptied), with short waits between network retries."""
    stripe_server.reset()
    settings.STRIPE_API_KEY = API_KEY
    settings.STRIPE_API_BASE = stripe_server.url
    settings.STRIPE_PUSH_WINDOW_MINUTES = 60
    settings.STRIPE_PUSH_GRACE_MINUTES = 15
    settings.STRIPE_MAX_NETWORK_RETRIES = 2
    monkeypatch.setattr(HTTPClient, "INITIAL_DELAY", 0.01)
    monkeypatch.setattr(HTTPClient, "MAX_DELAY", 0.02)
    return stripe_server.state
