"""End-to-end stacks, one per backend, shared by the tests of a module."""

from __future__ import annotations

import pytest

from .stack import Stack


def _stack(backend: str, tmp_path_factory):
    stack = Stack(backend, tmp_path_factory.mktemp(backend)).start()
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="session")
def pg_stack(tmp_path_factory):
    """PostgreSQL (psycopg) + Redis broker + gunicorn + a Celery worker process."""
    yield from _stack("postgres-redis", tmp_path_factory)


@pytest.fixture(scope="session")
def embedded_stack(tmp_path_factory):
    """SQLite + filesystem broker: no server but ours."""
    yield from _stack("embedded", tmp_path_factory)
