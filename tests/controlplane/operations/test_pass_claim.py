"""A worker pass's claim (``claim.claim_runnable``): every training model's next operation and
no other, a fair share of the samples across tenants, all fenced by the lease's generation. On
PostgreSQL one statement, elsewhere the portable way; the same tests for both."""

from __future__ import annotations

import pytest

from controlplane.fleet.services import Fence
from controlplane.operations import claim, complete
from controlplane.training_sessions.models import Operation
from tests.support.tiny_worker import TINY
from tests.support.wire import create_model, datum, fwdbwd, open_session

pytestmark = pytest.mark.django_db(transaction=True)


def _step(person, model_id: str, seq: int) -> str:
    r = person.post("forward_backward", fwdbwd(model_id, seq, [datum([1, 2, 3])]))
    assert r.status_code == 200, r.content
    return r.json()["request_id"]


def _sampler(person, session: str) -> str:
    r = person.post(
        "create_sampling_session",
        {"session_id": session, "sampling_session_seq_id": 0, "base_model": TINY},
    )
    assert r.status_code == 200, r.content
    return r.json()["sampling_session_id"]


def _sample(person, sampler: str, seq: int) -> str:
    body = {
        "sampling_session_id": sampler,
        "seq_id": seq,
        "num_samples": 1,
        "prompt": {"chunks": [{"type": "encoded_text", "tokens": [1, 2, 3]}]},
        "sampling_params": {"max_tokens": 2, "seed": seq},
    }
    r = person.post("asample", body)
    assert r.status_code == 200, r.content
    return r.json()["request_id"]


def test_a_pass_claims_each_models_next_operation_of_every_tenant(alice, charlie, runtime) -> None:
    a = create_model(alice, runtime, open_session(alice), seq=0)
    b = create_model(alice, runtime, open_session(alice), seq=0)
    c = create_model(charlie, runtime, open_session(charlie), seq=0)
    a2 = _step(alice, a, 2)  # waits for a's seq 1
    a1, b1, c1 = _step(alice, a, 1), _step(alice, b, 1), _step(charlie, c, 1)
    heads, samples = claim.claim_runnable(fence=runtime.fence, sample_limit=8)
    assert [op.pk for op in heads] == [a1, b1, c1] and samples == []  # oldest first
    assert all(op.status == "running" for op in heads)
    assert set(Operation.objects.filter(status="running").values_list("pk", flat=True)) == {
        a1,
        b1,
        c1,
    }
    assert claim.claim_runnable(fence=runtime.fence, sample_limit=8) == ([], [])
    complete.complete(heads[0], {"loss_fn_outputs": [], "metrics": {}}, runtime.fence)
    heads, _ = claim.claim_runnable(fence=runtime.fence, sample_limit=8)
    assert [op.pk for op in heads] == [a2]
    # charlie sees nothing of alice's
    assert charlie.post("retrieve_future", {"request_id": a1}).status_code == 404


def test_a_stale_generation_claims_nothing(alice, runtime) -> None:
    model_id = create_model(alice, runtime, open_session(alice))
    request_id = _step(alice, model_id, 1)
    old = Fence(runtime.fence.worker_id, runtime.fence.generation - 1)
    assert claim.claim_runnable(fence=old, sample_limit=8) == ([], [])
    assert Operation.objects.get(pk=request_id).status == "pending"
    heads, _ = claim.claim_runnable(fence=runtime.fence, sample_limit=8)
    assert [op.pk for op in heads] == [request_id]


def test_samples_are_claimed_round_robin_across_tenants(alice, charlie, runtime) -> None:
    """alice's backlog came first; charlie's two samples still get every other place."""
    mine = _sampler(alice, open_session(alice))
    theirs = _sampler(charlie, open_session(charlie))
    flood = [_sample(alice, mine, seq) for seq in range(1, 6)]
    late = [_sample(charlie, theirs, seq) for seq in (1, 2)]
    heads, first = claim.claim_runnable(fence=runtime.fence, sample_limit=4)
    assert heads == []
    assert sorted(op.pk for op in first) == sorted([flood[0], late[0], flood[1], late[1]])
    assert [op.pk for op in first] == sorted((op.pk for op in first), key=(flood + late).index)
    _, rest = claim.claim_runnable(fence=runtime.fence, sample_limit=10)
    assert [op.pk for op in rest] == flood[2:]
    assert claim.claim_runnable(fence=runtime.fence, sample_limit=10) == ([], [])
    assert alice.post("retrieve_future", {"request_id": late[0]}).status_code == 404


def test_a_claimed_pass_goes_back_to_pending_on_requeue(alice, runtime) -> None:
    model_id = create_model(alice, runtime, open_session(alice))
    request_id = _step(alice, model_id, 1)
    (op,), _ = claim.claim_runnable(fence=runtime.fence, sample_limit=8)
    assert claim.requeue(request_id=op.pk, fence=runtime.fence)
    assert Operation.objects.get(pk=request_id).status == "pending"
    (again,), _ = claim.claim_runnable(fence=runtime.fence, sample_limit=8)
    assert again.pk == request_id
