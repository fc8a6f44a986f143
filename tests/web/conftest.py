"""Dashboard fixtures: the three people (``tests/people.py``) logged in with Django's test client
(``tests/support/pages.py``), and a live worker with no process behind it."""

from __future__ import annotations

import pytest

from tests import people as people_
from tests.fleet import registration
from tests.people import PASSWORD
from tests.support.pages import BASE_MODEL, browsing


@pytest.fixture(autouse=True)
def _settings(control_plane_settings):
    """Every test here runs with the control plane's test settings."""


@pytest.fixture
def people(db):
    """The three people (``tests/people.py``) with password ``PASSWORD``, logged in."""
    return tuple(browsing(account) for account in people_.three_people(password=PASSWORD))


@pytest.fixture
def worker(db):
    """A live worker serving ``BASE_MODEL`` (no process behind it: operations stay queued)."""
    from controlplane.fleet.services import worker_register

    return worker_register(**registration("gpu0", BASE_MODEL)).worker
