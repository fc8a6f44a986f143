"""Engine fixtures: a shared cache with the tiny model, and fresh hosts on it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from workers.engine.catalog import TINY_MODEL, ModelCatalog
from workers.engine.host import HostConfig, ModelHost


@pytest.fixture(scope="session")
def tiny_catalog(tmp_path_factory: pytest.TempPathFactory) -> ModelCatalog:
    catalog = ModelCatalog(cache_dir=tmp_path_factory.mktemp("cache"))
    catalog.materialize(TINY_MODEL)
    return catalog


@pytest.fixture
def make_host(tiny_catalog: ModelCatalog, tmp_path: Path) -> Callable[..., ModelHost]:
    def make(**overrides) -> ModelHost:
        overrides.setdefault("spill_dir", tmp_path / f"spill-{len(list(tmp_path.iterdir()))}")
        return ModelHost(TINY_MODEL, HostConfig(**overrides), tiny_catalog)

    return make


@pytest.fixture
def host(make_host: Callable[..., ModelHost]) -> ModelHost:
    return make_host()
