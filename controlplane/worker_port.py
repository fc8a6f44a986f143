"""The worker port: every call a worker process makes into the control plane, in one module.

A worker (``workers``) imports this module and a few shared low modules (``storage``,
``kms.envelope`` and ``kms.keyring``, ``dispatch``, ``pg_listen``, ``metrics``), nothing else
of the control plane; ``.importlinter`` enforces it. What it calls, by subject:

- **the lease**: start (register, declaring a previous incarnation dead), renew, hand over on
  stopping, declare dead the workers silent past their lease, take the models and samplers
  that wait for a worker;
- **work**: claim a pass's operations, requeue one not run or not recorded, complete or fail
  one (every status change is ``training_sessions.operation_states``'s), settle ``seq_id``
  gaps and step over requests refused on arrival; the tokens an operation counts; the
  channels a sample's tokens are streamed on;
- **recovery**: the models to restore, their restore plans and the record of a restore (or of
  a model that cannot be restored), the service's snapshots (where one goes, recording it as
  the recovery point, deleting one);
- **keys and storage**: a tenant's KMS key by ARN, the key's provider, the storage at a URI,
  a claimed or replayed request with its sealed images opened;
- **replica groups**: the worker's membership, a group announced, ready, or broken.

Each call runs in the worker's process against the database, fenced by the lease's generation
where it changes anything. The functions here only name the call for the worker; the rules live
in the services they reach.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from controlplane.fleet import replica_groups
from controlplane.fleet import services as fleet
from controlplane.fleet.models import Worker
from controlplane.fleet.replica_groups import Membership
from controlplane.fleet.services import Fence, Registration
from controlplane.kms import providers as kms_providers
from controlplane.kms import selectors as kms_selectors
from controlplane.kms.keyring import KeyProvider, KeyRef
from controlplane.metering import tokens as metering_tokens
from controlplane.operations import claim as claims
from controlplane.operations import complete as completions
from controlplane.operations import ordering, token_notices
from controlplane.operations.complete import ClaimLost, Fenced
from controlplane.operations.token_notices import Entry as TokenEntry
from controlplane.storage import Storage
from controlplane.training_sessions import selectors as session_selectors
from controlplane.training_sessions.models import Operation
from controlplane.training_sessions.services import failover, placement, recovery, request_images
from controlplane.training_sessions.services import storage as session_storage
from controlplane.training_sessions.services.recovery import SNAPSHOT, NotHere, RestorePlan

__all__ = [
    "SNAPSHOT",
    "ClaimLost",
    "Fence",
    "Fenced",
    "Membership",
    "NotHere",
    "Registration",
    "RestorePlan",
    "TokenEntry",
    "Worker",
    "claim_runnable",
    "complete",
    "declare_dead",
    "fail",
    "group_announce",
    "group_broken",
    "group_ready",
    "hand_over",
    "has_waiting_work",
    "key_provider",
    "key_ref",
    "lease_renew",
    "membership",
    "model_replicas",
    "models_to_restore",
    "operation_usage",
    "request_payload",
    "requeue",
    "restore_failed",
    "restore_finished",
    "restore_plan",
    "settle_gaps",
    "snapshot_delete",
    "snapshot_record",
    "snapshot_target",
    "step_over_finished",
    "storage_at",
    "take_waiting",
    "token_channel",
    "token_notices_available",
    "token_notices_of",
    "wants_token_stream",
    "work_tokens",
    "worker_start",
]


# -- the lease ---------------------------------------------------------------------------------
def worker_start(*, by: str, **registration) -> Registration:
    """Register the worker process under a new generation (``fleet.worker_register``'s
    arguments); a previous incarnation that still held the name is declared dead at once."""
    return failover.worker_start(by=by, **registration)


def lease_renew(fence: Fence) -> bool:
    """The heartbeat: extend the lease. False: the worker was declared dead meanwhile; it must
    drop what it holds and start again."""
    return fleet.worker_renew(worker_id=fence.worker_id, generation=fence.generation)


def hand_over(*, fence: Fence, by: str) -> int:
    """The worker stops on its own (its models snapshotted): they and its samplers move to live
    workers now. Returns how many models moved."""
    return failover.worker_hand_over(fence=fence, by=by)


def declare_dead(*, by: str) -> list[str]:
    """Declare dead every worker silent past its lease (each once); returns their names."""
    return failover.workers_declare_dead(by=by)


def take_waiting(*, base_model: str) -> list[str]:
    """Place the models, then the samplers, of ``base_model`` that wait for a worker and can have
    one now (this one or another); returns their ids."""
    placed = placement.models_place_waiting(base_model=base_model)
    return placed + placement.samplers_place_waiting(base_model=base_model)


# -- work --------------------------------------------------------------------------------------
def claim_runnable(*, fence: Fence, sample_limit: int) -> tuple[list[Operation], list[Operation]]:
    """One pass's work, claimed under ``fence``: the next operation of every training model on
    the worker, and up to ``sample_limit`` samples, fair across tenants."""
    return claims.claim_runnable(fence=fence, sample_limit=sample_limit)


def has_waiting_work(*, worker: Worker, older_than_seconds: float | None = 2.0) -> bool:
    """Whether operations wait on the worker (older than ``older_than_seconds``; None: any)."""
    return claims.has_waiting_work(worker=worker, older_than_seconds=older_than_seconds)


def requeue(*, request_id: str, fence: Fence, home: bool = False) -> bool:
    """An operation the worker claimed but will not record now goes back to pending (``home``:
    on the worker its model or sampler is on now)."""
    return claims.requeue(request_id=request_id, fence=fence, home=home)


def complete(op: Operation, result: dict, fence: Fence) -> bool | None:
    """Record ``op``'s result with its effects and usage (``Fenced``: the lease was taken away;
    ``ClaimLost``: the database has it pending again). Returns whether other operations waited
    on the worker (None: not looked)."""
    return completions.complete(op, result, fence)


def fail(op: Operation, error: str, category: str, fence: Fence) -> None:
    """Record ``op`` as failed (``category``: ``user`` or ``server``)."""
    completions.fail(op, error, category, fence)


def settle_gaps(*, worker: Worker) -> int:
    """Record, for each model on the worker, the ``seq_id``s that never arrived (one failed row
    per gap), so the later ones run."""
    return ordering.settle_gaps(worker=worker)


def step_over_finished(*, worker: Worker) -> int:
    """Move past operations finished without running (refused on arrival)."""
    return ordering.step_over_finished(worker=worker)


def work_tokens(kind: str, payload: dict) -> int | None:
    """The tokens an operation processes (None: not a token-counted kind)."""
    return metering_tokens.work_tokens(kind, payload)


def operation_usage(kind: str, payload: dict, result: dict) -> dict[str, int]:
    """The tokens a finished operation is metered for, per meter."""
    return metering_tokens.operation_usage(kind, payload, result)


def token_notices_available() -> bool:
    """Whether sampled tokens can be streamed to whoever waits (PostgreSQL notices)."""
    return token_notices.available()


def token_channel(request_id: str) -> str:
    """The channel a sample's tokens are announced on."""
    return token_notices.channel(request_id)


def wants_token_stream(payload: dict) -> bool:
    """Whether a sample's request asked for its tokens as they are drawn."""
    return token_notices.wants_stream(payload)


def token_notices_of(entries: Iterable[TokenEntry]) -> Iterator[str]:
    """The notice payloads that carry ``entries`` (each within PostgreSQL's limit)."""
    return token_notices.notices(entries)


# -- recovery ----------------------------------------------------------------------------------
def models_to_restore(*, fence: Fence) -> list[str]:
    """Models moved onto the worker that wait to be restored there."""
    return recovery.models_to_restore(worker_id=fence.worker_id)


def restore_plan(*, model_id: str, fence: Fence) -> RestorePlan:
    """What restores ``model_id`` on the worker: its recovery point and the operations to replay
    (``NotHere``: the model is not, or no longer, on this worker)."""
    return recovery.restore_plan(model_id=model_id, fence=fence)


def restore_finished(
    *, plan: RestorePlan, fence: Fence, worker_name: str, replayed: int, deviation: float
):
    """Record that ``plan`` ran (its recovery rows and the audit log)."""
    return recovery.restore_finished(
        plan=plan, fence=fence, worker_name=worker_name, replayed=replayed, deviation=deviation
    )


def restore_failed(*, model_id: str, worker_name: str, why: str) -> str:
    """The model cannot be restored: it fails with its unfinished operations, saying where its
    user can resume. Returns the message."""
    return completions.restore_failed(model_id=model_id, worker_name=worker_name, why=why)


def snapshot_target(*, model_id: str, seq: int) -> dict:
    """Where the service's snapshot of ``model_id`` after ``seq`` goes and the key sealing it."""
    return recovery.snapshot_target(model_id=model_id, seq=seq)


def snapshot_record(*, model_id: str, fence: Fence, point: dict) -> bool:
    """Make a written snapshot the model's recovery point (False: not, the caller deletes it)."""
    return recovery.snapshot_record(model_id=model_id, fence=fence, point=point)


def snapshot_delete(point: dict) -> None:
    """Delete a snapshot from its storage."""
    recovery.snapshot_delete(point)


def model_replicas(model_id: str) -> int:
    """The data-parallel ranks ``model_id`` trains on (1: this worker alone)."""
    return session_selectors.model_replicas(model_id)


# -- keys and storage --------------------------------------------------------------------------
def key_ref(*, tenant_id, arn: str) -> KeyRef:
    """The tenant's KMS key ``arn`` as the database holds it now (``KeyNotFoundError`` for a key
    of anyone else)."""
    return kms_selectors.key_ref_by_arn(tenant_id=tenant_id, arn=arn)


def request_payload(op: Operation) -> dict:
    """``op``'s request as sent, its images opened with the tenant's KMS key (``op.payload``
    itself when it holds none); raises a ``DomainError`` (the key can no longer open them) or
    ``KmsUnavailable``."""
    return request_images.payload_open(op)


def key_provider(key: KeyRef) -> KeyProvider:
    """The provider that wraps and unwraps data keys under ``key`` (local or AWS KMS)."""
    return kms_providers.provider(key)


def storage_at(uri: str) -> Storage:
    """The storage at ``uri``, with the install's S3 settings."""
    return session_storage.storage_at(uri)


# -- replica groups ----------------------------------------------------------------------------
def membership(*, fence: Fence) -> Membership | None:
    """The replica group the worker belongs to now (None: none, or the fence no longer holds)."""
    return replica_groups.membership(fence=fence)


def group_announce(*, group_id: int, fence: Fence, rendezvous: str) -> bool:
    """The coordinator publishes where the other ranks join (False: it no longer leads it)."""
    return replica_groups.group_announce(group_id=group_id, fence=fence, rendezvous=rendezvous)


def group_ready(*, group_id: int, fence: Fence) -> bool:
    """Every rank joined: the group's operations can run (False: it ended meanwhile)."""
    return replica_groups.group_ready(group_id=group_id, fence=fence)


def group_broken(group_id: int, *, by: str, reason: str) -> int:
    """The group cannot go on: it ends and its models move. Returns how many moved."""
    return failover.group_broken(group_id, by=by, reason=reason)
