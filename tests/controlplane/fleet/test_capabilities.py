"""``get_server_capabilities`` (tinker 0.38's ``SupportedModel``): every base model a live worker
serves, with its context length and whether it can be trained and sampled now."""

from __future__ import annotations

import pytest

from controlplane.fleet.services import worker_register
from tests.fleet import registration

pytestmark = pytest.mark.django_db


def capabilities(person) -> dict[str, dict]:
    r = person.get("get_server_capabilities")
    assert r.status_code == 200, r.content
    return {m["model_name"]: m for m in r.json()["supported_models"]}


def test_each_served_model_says_whether_it_trains_and_samples(alice) -> None:
    worker_register(**registration("whole", "m/whole", capacity=4))
    worker_register(**registration("sampling-only", "m/sampler", capacity=0))
    # a base held by sharding workers: one of two needed ranks is not yet a group
    worker_register(**registration("shard-a", "m/sharded", capacity=4, shard_ranks=2))
    models = capabilities(alice)
    assert models["m/whole"] == {
        "model_name": "m/whole",
        "max_context_length": 2048,
        "trainable": True,
        "sampleable": True,
    }
    assert (models["m/sampler"]["trainable"], models["m/sampler"]["sampleable"]) == (False, True)
    assert (models["m/sharded"]["trainable"], models["m/sharded"]["sampleable"]) == (False, False)
    worker_register(**registration("shard-b", "m/sharded", capacity=4, shard_ranks=2))
    models = capabilities(alice)
    assert (models["m/sharded"]["trainable"], models["m/sharded"]["sampleable"]) == (True, True)
