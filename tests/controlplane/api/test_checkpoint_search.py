"""checkpoints/search: the account's checkpoints newest first, by kind, base model and the
user_metadata of their save, a page at a time; charlie sees none of alice's."""

from __future__ import annotations

import pytest

from tests.support.tiny_worker import TINY
from tests.support.wire import create_model, open_session, result

pytestmark = pytest.mark.django_db


def save(person, runtime, model: str, seq: int, kind: str, name: str, metadata=None) -> str:
    body = {"model_id": model, "seq_id": seq, "path": name}
    if metadata:
        body["user_metadata"] = metadata
    r = person.post("save_weights" if kind == "training" else "save_weights_for_sampler", body)
    assert r.status_code == 200, r.content
    return result(person, runtime, r.json())["path"]


def test_search_by_kind_metadata_and_pages(alice, charlie, runtime):
    model = create_model(alice, runtime, open_session(alice))
    a = save(alice, runtime, model, 1, "training", "a", {"stage": "warmup"})
    b = save(alice, runtime, model, 2, "sampler", "b", {"stage": "final"})
    c = save(alice, runtime, model, 3, "training", "c", {"stage": "final"})
    found = alice.post("checkpoints/search", {}).json()
    assert [x["tinker_path"] for x in found["checkpoints"]] == [c, b, a]
    assert found["checkpoints"][0]["user_metadata"] == {"stage": "final"}
    assert found["checkpoints"][0]["base_model"] == TINY
    final = alice.post("checkpoints/search", {"user_metadata": {"stage": "final"}}).json()
    assert [x["tinker_path"] for x in final["checkpoints"]] == [c, b]
    training = alice.post("checkpoints/search", {"checkpoint_type": "training"}).json()
    assert [x["tinker_path"] for x in training["checkpoints"]] == [c, a]
    page = alice.post("checkpoints/search", {"limit": 2}).json()
    assert len(page["checkpoints"]) == 2 and page["next_cursor"]
    rest = alice.post("checkpoints/search", {"limit": 2, "cursor": page["next_cursor"]}).json()
    assert [x["tinker_path"] for x in rest["checkpoints"]] == [a] and rest["next_cursor"] is None
    none = alice.post("checkpoints/search", {"base_models": ["other/model"]}).json()
    assert none["checkpoints"] == []
    assert charlie.post("checkpoints/search", {}).json()["checkpoints"] == []
    r = alice.post("checkpoints/search", {"limit": 0})
    assert r.status_code == 400 and r.json()["field"] == "limit"
    r = alice.post("checkpoints/search", {"checkpoint_type": "merged"})
    assert r.status_code == 400 and r.json()["field"] == "checkpoint_type"
