"""One live stack (PostgreSQL, Redis, gunicorn, a Celery worker on the tiny model) shared by every
recipe test, and the environment a recipe reads its key, server and role from."""

from __future__ import annotations

import pytest

from tests.e2e.stack import Stack


@pytest.fixture(scope="session")
def cook_stack(tmp_path_factory):
    stack = Stack("postgres-redis", tmp_path_factory.mktemp("cookbook-stack")).start()
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture
def server(cook_stack, monkeypatch, tmp_path_factory):
    monkeypatch.setenv("LOOPWRIGHT_BASE_URL", cook_stack.url)
    monkeypatch.setenv("LOOPWRIGHT_API_KEY", cook_stack.keys["alice"])
    monkeypatch.setenv("LOOPWRIGHT_ROLE_ARN", cook_stack.roles["alice"])
    monkeypatch.setenv("LOOPWRIGHT_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return cook_stack
