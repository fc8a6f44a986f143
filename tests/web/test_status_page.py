"""The status page lists live workers and their base models, and no tenant's data."""

from __future__ import annotations

import pytest

from controlplane.fleet.services import worker_register
from tests.fleet import registration

pytestmark = pytest.mark.django_db


def test_status_page_shows_workers_and_base_models(client) -> None:
    empty = client.get("/status")
    assert empty.status_code == 200 and b"No live worker" in empty.content
    worker_register(**registration("gpu0", "acme/model"))
    page = client.get("/status").content.decode()
    assert "acme/model" in page and "gpu0" in page and "2048" in page and "8 models" in page


def test_status_page_shows_the_navigation_to_someone_logged_in(alice) -> None:
    page = alice.get("/status").content.decode()
    assert 'href="/sessions"' in page and "acme" in page
