"""The engines the worker drives answer the interface it calls (``workers.engine.interface``):
a host and the worker's router are ``Engine``s, a replica group's coordinator an
``AdapterEngine``. Checked when the tests run (each member present) and by mypy in ``make lint``
(each signature: ``_statically``)."""

import pytest

from workers.engine.distributed import DataParallel
from workers.engine.host import ModelHost
from workers.engine.interface import AdapterEngine, Engine
from workers.replicated_host import ReplicatedHost


def _statically(host: ModelHost, dp: DataParallel, router: ReplicatedHost) -> None:
    """Never called: mypy checks that each class's signatures fit its protocol."""
    engines: list[Engine] = [host, router]
    adapter_engines: list[AdapterEngine] = [host, dp, router]
    del engines, adapter_engines


@pytest.fixture
def host(tiny_host_factory) -> ModelHost:
    return tiny_host_factory()


def test_a_host_and_the_router_are_engines(host) -> None:
    router = ReplicatedHost(host, lambda model_id: False)
    for engine in (host, router):
        assert isinstance(engine, Engine)
        assert isinstance(engine, AdapterEngine)


def test_a_replica_groups_coordinator_takes_every_adapter_call_and_no_more() -> None:
    assert issubclass(DataParallel, AdapterEngine)
    # what only a host answers is not the group's: the worker asks its host
    assert not all(hasattr(DataParallel, name) for name in ("has_adapter", "forward_many"))


def test_the_router_forwards_nothing_it_does_not_name(host) -> None:
    """Every call the worker makes is a method of the router (none reaches the host unseen),
    so the check above is of its own methods."""
    router = ReplicatedHost(host, lambda model_id: False)
    assert hasattr(host, "capture")
    with pytest.raises(AttributeError):
        router.capture  # type: ignore[attr-defined]  # noqa: B018 — never called on the router
