"""Test-wide settings: nothing may reach a model hub."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


import pytest

# The fixtures several folders share (tests/support/fixtures.py): settings, people, the tiny worker.
pytest_plugins = ["tests.support.fixtures"]

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Two test processes share the cores: torch's default of one thread per core would put
    # four threads on two cores, and every multi-threaded op would wait at its barrier for a
    # thread the other process has taken off the core.
    import torch

    torch.set_num_threads(1)


def _reseed_default_prices(sender, app_config, apps=None, **kwargs) -> None:
    """A transactional test empties every table when it ends, then Django sends post_migrate:
    put back the rows the data migrations seed (the default prices), so a test that runs after
    it in the same process sees the database a fresh migrate leaves."""
    if app_config.label == "metering":
        import importlib

        from django.apps import apps as installed

        for name in ("0002_default_prices", "0008_storage_price"):
            seeded = importlib.import_module(f"controlplane.metering.migrations.{name}")
            seeded.seed(apps or installed, None)  # a flush sends no ``apps``: the installed ones


@pytest.fixture(scope="session", autouse=True)
def _default_prices_outlive_flushes():
    from django.db.models.signals import post_migrate

    post_migrate.connect(_reseed_default_prices, dispatch_uid="loopwright-test-reseed-prices")
    yield
    post_migrate.disconnect(dispatch_uid="loopwright-test-reseed-prices")


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup):
    """The test database, as pytest-django makes it; before it is dropped, this process's
    listening connection (IAM changes, finished operations) is closed."""
    yield
    from controlplane.pg_listen import listener

    listener.stop()


# The three people (tests/people.py): ``people`` is theirs as API callers
# (tests/support/fixtures.py) unless a folder's conftest defines them as its own clients.
@pytest.fixture
def alice(people):
    return people[0]


@pytest.fixture
def bob(people):
    return people[1]


@pytest.fixture
def charlie(people):
    return people[2]
