"""Fixtures shared by the tests of several faces (registered once, in ``tests/conftest.py``):
the control plane's test settings, the three people as API callers and an in-process worker on
the tiny model. A folder's conftest turns ``control_plane_settings`` on for its tests and may
define ``people`` or ``runtime`` as its own."""

from __future__ import annotations

import pytest

from .callers import three_callers
from .tiny_worker import tiny_hosts, tiny_runtime


@pytest.fixture
def control_plane_settings(settings, tmp_path):
    """Settings for a control plane with no heartbeat, no broker and no committed notices."""
    settings.WORKER_LEASE_SECONDS = 600  # no heartbeat runs in these tests
    settings.BROKER_URL = "memory://"
    settings.STORAGE_DIR = tmp_path / "storage"
    settings.LONG_POLL_SECONDS = 0.2
    settings.NOTIFY_ON_COMPLETION = False  # tests run inside a transaction: notices never commit
    return settings


@pytest.fixture
def people(db):
    """The three people (``tests/people.py``), each calling the API with their own key."""
    return three_callers()


@pytest.fixture(scope="session")
def tiny_host_factory(tmp_path_factory):
    return tiny_hosts(tmp_path_factory.mktemp("models"), lambda: tmp_path_factory.mktemp("spill"))


@pytest.fixture
def runtime(db, tiny_host_factory):
    """A worker runtime on a fresh host of the tiny model, room for 4 models."""
    return tiny_runtime(tiny_host_factory())
