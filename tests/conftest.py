"""Test-wide settings: nothing may reach a model hub."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


import pytest


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup):
    """The test database, as pytest-django makes it; before it is dropped, this process's
    listening connection (IAM changes, finished operations) is closed."""
    yield
    from controlplane.pg_listen import listener

    listener.stop()


# The three people (tests/people.py); each face's conftest defines ``people`` as its own clients.
@pytest.fixture
def alice(people):
    return people[0]


@pytest.fixture
def bob(people):
    return people[1]


@pytest.fixture
def charlie(people):
    return people[2]
