"""Submitting operations: validate the session's state, make the row idempotent, wake the worker.

Each training request lands as an Operation with the client's ``seq_id``; ``(model, seq_id)`` is
unique, so a retried request returns the same row and another body with the same ``seq_id`` is a
409. The worker is woken after commit.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable

from django.db import IntegrityError, connection, transaction
from django.db.models import Max
from django.utils import timezone

from controlplane import dispatch, row_mapper
from controlplane.fleet.models import Worker
from controlplane.fleet.selectors import base_model_require
from controlplane.fleet.services import Network
from controlplane.quotas.budget import token_budget_check
from controlplane.tenants.models import Tenant

from ..errors import Conflict, NotActive, NotFound, SessionError, Unavailable
from ..models import Checkpoint, Operation, SamplingSession, Session, TrainingModel, new_id
from ..selectors import checkpoint_by_path, model_get, sampler_get, session_get
from . import placement, sequence, vocabulary
from .checkpoint_plans import opening, stored_fields
from .lora import lora_checked
from .sessions import session_touch

OPEN_STATES = (Session.State.PENDING, Session.State.ACTIVE)
DEFAULT_ALPHA = 32.0
TOUCH_SECONDS = 5.0
# operations that consume metered tokens, refused once the tenant's monthly budget is used up
TOKEN_KINDS = frozenset({Operation.Kind.FORWARD, Operation.Kind.FORWARD_BACKWARD})


def digest(payload: dict) -> str:
    return hashlib.sha256(
        json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


def _require_open(session: Session) -> None:
    if session.state not in OPEN_STATES:
        raise NotActive(
            f"session {session.id} is {session.state}; it takes no more operations",
            field="session_id",
        )


def _require_ready(model: TrainingModel) -> None:
    _require_open(model.session)
    if model.state not in (TrainingModel.State.CREATING, TrainingModel.State.READY):
        raise NotActive(
            f"model {model.id} is {model.state}; it takes no more operations", field="model_id"
        )


def _existing_or_conflict(existing: Operation, payload_digest: str, what: str) -> Operation:
    if existing.payload_digest != payload_digest:
        raise Conflict(
            f"{what} was already used by a different request ({existing.id})", field="seq_id"
        )
    return existing


def _create_op(
    lookup: dict, what: str, *, existing: Operation | None = None, checked: bool = False, **fields
) -> Operation:
    """Insert the row, or return the identical one a retry already inserted."""
    if not checked:
        existing = Operation.objects.filter(**lookup).first()
    if existing is not None:
        return _existing_or_conflict(existing, fields["payload_digest"], what)
    try:
        with transaction.atomic():
            op = Operation.objects.create(**lookup, **fields)
    except IntegrityError:
        return _existing_or_conflict(
            Operation.objects.get(**lookup), fields["payload_digest"], what
        )
    if op.worker is not None and op.status == Operation.Status.PENDING:
        # else it waits with its model, and goes when the model is placed
        dispatch.wake_worker(op.worker.queue, inserted=True)
    return op


# -- models ----------------------------------------------------------------------------------
@transaction.atomic
def model_create(
    *,
    tenant: Tenant,
    session_id: str,
    model_seq_id: int,
    base_model: str,
    lora: dict,
    user_metadata=None,
    model_id: str | None = None,
    load: tuple[dict, Callable[[TrainingModel], dict]] | None = None,
) -> Operation:
    """Create a model (``model_id``, or a fresh id) as operation 0 of its session's
    ``model_seq_id``. ``load``: the request and plan of a checkpoint to load into it in the
    same operation (a model made by ``load_weights``), before any ``seq_id`` is taken."""
    session = session_get(tenant=tenant, session_id=session_id)
    _require_open(session)
    payload = {
        "base_model": base_model,
        "lora": lora,
        "model_seq_id": model_seq_id,
        "user_metadata": user_metadata,
        **({"load": load[0]} if load else {}),
    }
    existing = TrainingModel.objects.filter(session=session, model_seq_id=model_seq_id).first()
    if existing is not None:
        op = existing.operations.filter(kind=Operation.Kind.CREATE_MODEL).first()
        if op is None:  # the slot holds a copy of a checkpoint (copy_weights)
            raise Conflict(
                f"model_seq_id {model_seq_id} holds {existing.id}, a copy of a checkpoint",
                field="model_seq_id",
            )
        return _existing_or_conflict(op, digest(payload), f"model_seq_id {model_seq_id}")
    lora_checked(lora)
    base_model_require(base_model)
    lora = {**lora, "alpha": float(lora.get("alpha") or DEFAULT_ALPHA)}
    if lora.get("seed") is None:
        # chosen now and kept: a worker that rebuilds the model from its start (a failover
        # before any recovery point) initialises exactly the same adapter
        lora["seed"] = secrets.randbelow(2**31)
    model = TrainingModel.objects.create(
        id=model_id or "",
        tenant=tenant,
        session=session,
        model_seq_id=model_seq_id,
        base_model=base_model,
        lora=lora,
        user_metadata=user_metadata,
        worker=None,
        placement=TrainingModel.Placement.WAITING_FOR_WORKER,
        next_seq=0,
    )
    session_touch(session)
    op = _create_op(
        {"model": model, "seq_id": 0},
        "create_model",
        tenant=tenant,
        session=session,
        worker=None,
        kind=Operation.Kind.CREATE_MODEL,
        payload=payload,
        payload_digest=digest(payload),
        plan={"adapter": model.id, "lora": lora, **(load[1](model) if load else {})},
    )
    placement.model_place_new(model)  # or it waits, and its operations queue up
    return op


@transaction.atomic
def model_unload(*, tenant: Tenant, model: TrainingModel, ending: bool = False) -> Operation:
    """Unload after everything already submitted; later requests for the model are refused."""
    model = TrainingModel.objects.select_for_update().get(pk=model.pk)
    if not ending:
        _require_open(model.session)
    existing = model.operations.filter(kind=Operation.Kind.UNLOAD_MODEL).first()
    if existing is not None:
        return existing
    if model.state not in (TrainingModel.State.CREATING, TrainingModel.State.READY):
        raise NotActive(f"model {model.id} is {model.state}", field="model_id")
    top = model.operations.aggregate(m=Max("seq_id"))["m"]
    seq = max(top if top is not None else -1, model.next_seq - 1) + 1
    payload = {"model_id": model.id}
    ended: dict = {}
    if model.worker_id is None:  # still waiting for a worker: it just ends, nothing to dispatch
        placement.model_end_waiting(model)
        ended = {
            "status": Operation.Status.DONE,
            "result": {"model_id": model.id, "type": "unload_model"},
            "finished_at": timezone.now(),
        }
    else:
        model.state = TrainingModel.State.UNLOADING
        model.save(update_fields=["state"])
    return _create_op(
        {"model": model, "seq_id": seq},
        "unload_model",
        tenant=tenant,
        session=model.session,
        worker=model.worker,
        kind=Operation.Kind.UNLOAD_MODEL,
        payload=payload,
        payload_digest=digest(payload),
        plan={"adapter": model.id},
        **ended,
    )


# -- training operations ----------------------------------------------------------------------
@transaction.atomic(savepoint=False)  # inside the request's transaction: no savepoint needed
def training_submit(
    *,
    tenant: Tenant,
    model_id: str,
    seq_id: int | None,
    kind: str,
    payload: dict,
    plan: dict | None = None,
) -> Operation:
    """Insert the operation under the model's row lock, in two statements: the lock (which
    also reads the model's session and worker, and any earlier request with this ``seq_id``),
    then the insert (whose trigger wakes the worker on PostgreSQL)."""
    locked = _model_locked(tenant=tenant, model_id=model_id, seq_id=seq_id)
    if locked is None:
        raise NotFound(f"model {model_id!r} not found", field="model_id")
    model, existing_id, existing_digest = locked
    payload_digest = digest(payload)  # JSON-encodes the whole request: once
    if existing_id is not None and existing_digest == payload_digest:
        # a retry: same answer whatever state the session is in now
        return Operation.objects.select_related("worker").get(pk=existing_id)
    _require_ready(model)
    if kind in TOKEN_KINDS:
        key = "forward_input" if kind == Operation.Kind.FORWARD else "forward_backward_input"
        vocabulary.vocab_check(
            base_model=model.base_model,
            highest=vocabulary.highest_token(payload.get(key)),
            field=f"{key}.data",
        )
        token_budget_check(tenant=tenant)
    if seq_id is None:
        top = model.operations.aggregate(m=Max("seq_id"))["m"] or 0
        seq_id = top + 1
    elif seq_id < 1:
        raise SessionError(f"seq_id must be ≥ 1, got {seq_id}", field="seq_id")
    elif seq_id < model.next_seq:
        raise Conflict(
            f"seq_id {seq_id} is behind the model (next is {model.next_seq})", field="seq_id"
        )
    else:
        sequence.window_check(model, seq_id)
    plan = {
        "adapter": model.id,
        "base_model": model.base_model,
        **(plan(model) if callable(plan) else plan or {}),
    }
    if existing_id is not None:
        raise Conflict(
            f"seq_id {seq_id} of model {model.id} was already used by a different request "
            f"({existing_id})",
            field="seq_id",
        )
    sampler_seq = payload.get("sampling_session_seq_id")
    if plan.get("sampler_id") and isinstance(sampler_seq, int):
        sampler_seq_free(model.session, sampler_seq)
    _touch(model)
    op = Operation(
        tenant=tenant,
        session=model.session,
        model=model,
        worker=model.worker,
        seq_id=seq_id,
        kind=kind,
        payload=payload,
        payload_digest=payload_digest,
        plan=plan,
    )
    op.id = new_id("req")
    # Every insert of a model's operation holds the model's row lock. A request that took this
    # seq_id while the lock was waited for is not in the look above (its snapshot is older):
    # the insert steps aside, and it is answered as a retry or a conflict.
    if not row_mapper.insert(op, unless_conflict=True):
        existing = Operation.objects.select_related("worker").get(model=model, seq_id=seq_id)
        return _existing_or_conflict(
            existing, payload_digest, f"seq_id {seq_id} of model {model.id}"
        )
    if op.worker is not None:  # else it waits with its model, and goes when the model is placed
        dispatch.wake_worker(op.worker.queue, inserted=True)
    return op


def _model_locked(
    *, tenant: Tenant, model_id: str, seq_id: int | None
) -> tuple[TrainingModel, str | None, str | None] | None:
    """The tenant's model ``model_id``, its row locked until the transaction ends, with its
    session and worker loaded, and the id and digest of its operation ``seq_id`` if there is
    one; None if the tenant has no such model. One statement."""
    models, sessions = TrainingModel._meta.db_table, Session._meta.db_table
    ops, workers = Operation._meta.db_table, Worker._meta.db_table
    lock = " FOR UPDATE OF m" if connection.features.has_select_for_update_of else ""
    sql = f"""
        SELECT {row_mapper.select_list(TrainingModel, "m")}, {row_mapper.select_list(Session, "s")},
               {row_mapper.select_list(Worker, "w")}, e.id, e.payload_digest
        FROM {models} m
        JOIN {sessions} s ON s.id = m.session_id
        LEFT JOIN {workers} w ON w.id = m.worker_id
        LEFT JOIN {ops} e ON e.model_id = m.id AND e.seq_id = %s
        WHERE m.tenant_id = %s AND m.id = %s{lock}
    """
    tenant_id = TrainingModel._meta.get_field("tenant").get_db_prep_value(tenant.pk, connection)
    with connection.cursor() as cursor:
        cursor.execute(sql, [seq_id, tenant_id, model_id])
        row = cursor.fetchone()
    if row is None:
        return None
    n_model, n_session = row_mapper.width(TrainingModel), row_mapper.width(Session)
    model = row_mapper.load(TrainingModel, row[:n_model])
    model.session = row_mapper.load(Session, row[n_model : n_model + n_session])
    worker_row = row[n_model + n_session : -2]
    model.worker = row_mapper.load(Worker, worker_row) if worker_row[0] is not None else None
    model.tenant = tenant
    return model, row[-2], row[-1]


def training_reject(
    *, tenant: Tenant, model_id: object, seq_id: object, kind: str, error: str
) -> None:
    """A training request refused on arrival still takes its seq_id, as a failed operation,
    so the model's later requests do not wait for it forever."""
    if (
        not isinstance(model_id, str)
        or not isinstance(seq_id, int)
        or isinstance(seq_id, bool)
        or seq_id < 1
    ):
        return
    with transaction.atomic():
        model = (
            TrainingModel.objects.select_for_update(of=("self",))
            .select_related("worker")
            .filter(tenant=tenant, id=model_id)
            .first()
        )
        if model is None or seq_id < model.next_seq:
            return
        if not sequence.in_window(model.next_seq, seq_id):
            return  # refused for that alone: it takes no seq_id
        if model.operations.filter(seq_id=seq_id).exists():
            return
        Operation.objects.create(
            tenant=tenant,
            session_id=model.session_id,
            model=model,
            worker_id=model.worker_id,
            seq_id=seq_id,
            kind=kind,
            payload={},
            payload_digest="",
            status=Operation.Status.FAILED,
            error=error[:10000],
            error_category="user",
            finished_at=timezone.now(),
        )
    if model.worker is not None:
        dispatch.wake_worker(model.worker.queue)


def _touch(model: TrainingModel) -> None:
    """Requests count as signs of life; written at most once a few seconds, not per request."""
    now = timezone.now()
    if (now - model.last_request_at).total_seconds() > TOUCH_SECONDS:
        TrainingModel.objects.filter(pk=model.pk).update(last_request_at=now)
    beat = model.session.last_heartbeat_at
    if beat is None or (now - beat).total_seconds() > TOUCH_SECONDS:
        session_touch(model.session)


# -- sampling --------------------------------------------------------------------------------
@transaction.atomic
def sampler_create(
    *,
    tenant: Tenant,
    session_id: str,
    seq: int | None,
    base_model: str | None,
    model_path: str | None,
    model_id: str | None,
) -> SamplingSession:
    session = session_get(tenant=tenant, session_id=session_id)
    if seq is not None:
        existing = SamplingSession.objects.filter(
            session=session, sampling_session_seq_id=seq
        ).first()
        if existing is not None:
            wanted = {"model_id": model_id, "model_path": model_path, "base_model": base_model}
            if _same_source(existing, tenant, **wanted):
                return existing  # a retry
            raise _sampler_seq_conflict(session, seq, existing.id)
        _sampler_seq_unreserved(session, seq)
    _require_open(session)
    network = placement.session_network(session)
    fields: dict = {"tenant": tenant, "session": session, "sampling_session_seq_id": seq}
    if model_id:
        model = model_get(tenant=tenant, model_id=model_id)
        _require_ready(model)
        # on its model's worker; with the model while it waits for one
        fields.update(base_model=model.base_model, live_model=model, worker=model.worker)
    elif model_path:
        ckpt = checkpoint_by_path(tenant=tenant, tinker_path=model_path, field="model_path")
        opening(tenant, ckpt, field="model_path", session=session)  # refuse now if it cannot
        worker = _sampler_worker(ckpt.base_model, network, prefer=ckpt.model.worker)
        fields.update(
            base_model=ckpt.base_model,
            model_path=ckpt.tinker_path,  # a model package ARN is stored as what it names
            storage_path=ckpt.storage_path,
            worker=worker,
        )
    elif base_model:
        fields.update(base_model=base_model, worker=_sampler_worker(base_model, network))
    else:
        raise SessionError("give base_model, model_path or model_id", field="base_model")
    session_touch(session)
    return SamplingSession.objects.create(**fields)


def _same_source(
    sampler: SamplingSession,
    tenant: Tenant,
    *,
    model_id: str | None,
    model_path: str | None,
    base_model: str | None,
) -> bool:
    """Whether ``sampler`` is what a create_sampling_session with these fields opens."""
    if model_id:
        return sampler.live_model_id == model_id
    if model_path:
        if sampler.live_model_id or not sampler.model_path:
            return False
        if sampler.model_path == model_path:
            return True
        try:  # a model package ARN names a checkpoint: the sampler holds its path
            ckpt = checkpoint_by_path(tenant=tenant, tinker_path=model_path, field="model_path")
        except NotFound:
            return False
        return ckpt.tinker_path == sampler.model_path
    return not sampler.live_model_id and not sampler.model_path and sampler.base_model == base_model


def _sampler_seq_conflict(session: Session, seq: int, holder: str) -> Conflict:
    return Conflict(
        f"sampling_session_seq_id {seq} of session {session.id} was already used by a different "
        f"request ({holder}); a client that attaches to a session continues after the numbers "
        "it used (get_info's next_sampling_session_seq_id)",
        field="sampling_session_seq_id",
    )


def _sampler_seq_unreserved(session: Session, seq: int) -> None:
    """Refuse ``seq`` if an ephemeral sampler save still to run will open a sampler with it."""
    holder = (
        Operation.objects.filter(
            session=session,
            kind=Operation.Kind.SAVE_WEIGHTS_FOR_SAMPLER,
            status__in=(Operation.Status.PENDING, Operation.Status.RUNNING),
            payload__sampling_session_seq_id=seq,
        )
        .values_list("id", flat=True)
        .first()
    )
    if holder is not None:
        raise _sampler_seq_conflict(session, seq, holder)


def sampler_seq_free(session: Session, seq: int) -> None:
    """Refuse ``seq`` for a new sampler (an ephemeral save's) when the session used it already:
    otherwise the save would run and then find its sampler's number taken."""
    holder = (
        SamplingSession.objects.filter(session=session, sampling_session_seq_id=seq)
        .values_list("id", flat=True)
        .first()
    )
    if holder is not None:
        raise _sampler_seq_conflict(session, seq, holder)
    _sampler_seq_unreserved(session, seq)


def _sampler_worker(base_model: str, network: Network, prefer=None) -> Worker | None:
    """A live worker of ``base_model`` on the session's network, ``prefer`` if it is one; None
    while no worker is live for a base model one has served (its requests wait, as after a
    worker is lost)."""
    from controlplane.fleet.services import live_workers

    serving = list(live_workers().filter(base_model_id=base_model).order_by("name"))
    workers = [w for w in serving if network.admits(w)]
    if prefer is not None and prefer in workers:
        return prefer
    if workers:
        return workers[0]
    if serving:
        raise Unavailable(
            f"no live worker serves {base_model!r} for this session: it needs {network.wanted()}",
            field="base_model",
        )
    base_model_require(base_model)
    return None


def sampler_plan(sampler: SamplingSession, *, tenant: Tenant) -> dict:
    """What the worker needs to sample: the adapter (none: the base model), where its saved
    weights are, and the base model (which the usage rows name)."""
    return {"base_model": sampler.base_model, **_sampler_weights(sampler, tenant)}


def _sampler_weights(sampler: SamplingSession, tenant: Tenant) -> dict:
    if sampler.live_model_id:
        return {"adapter": sampler.live_model_id}
    if sampler.storage_path:
        ckpt = Checkpoint.objects.filter(tenant=tenant, tinker_path=sampler.model_path).first()
        return {
            "adapter": f"sampler:{sampler.id}",
            "storage_path": sampler.storage_path,
            "sealing": opening(tenant, ckpt, field="sampling_session_id", session=sampler.session),
            **stored_fields(ckpt),
        }
    return {"adapter": None}


@transaction.atomic
def sample_submit(
    *,
    tenant: Tenant,
    sampling_session_id: str,
    seq_id: int | None,
    payload: dict,
    idempotency_key: str | None = None,
    request_digest: str | None = None,
) -> Operation:
    """A sample request. A retry (the same ``seq_id`` of the sampler, or the same
    ``idempotency_key`` in the tenant) gets its operation back, whatever the session's state
    now; the same key or ``seq_id`` with another request (``request_digest``, by default the
    payload's) is a 409."""
    sampler = sampler_get(tenant=tenant, sampling_session_id=sampling_session_id)
    request_digest = request_digest or digest(payload)
    if idempotency_key is not None:
        lookup: dict = {"tenant": tenant, "idempotency_key": idempotency_key}
        what = f"Idempotency-Key {idempotency_key!r}"
    else:
        lookup = {"sampling_session": sampler, "seq_id": seq_id}
        what = f"seq_id {seq_id} of sampler {sampler.id}"
    if idempotency_key is not None or seq_id is not None:
        existing = Operation.objects.filter(**lookup).first()
        if existing is not None:
            return _existing_or_conflict(existing, request_digest, what)
    _require_open(sampler.session)
    if sampler.live_model_id:
        _require_ready(sampler.live_model)
    highest = vocabulary.highest_sampled(payload)
    vocabulary.vocab_check(base_model=sampler.base_model, highest=highest, field="prompt")
    token_budget_check(tenant=tenant)
    session_touch(sampler.session)
    fields = dict(
        tenant=tenant,
        session=sampler.session,
        worker=sampler.worker,
        kind=Operation.Kind.SAMPLE,
        payload=payload,
        payload_digest=request_digest,
        plan=sampler_plan(sampler, tenant=tenant),
    )
    if idempotency_key is None and seq_id is None:
        op = Operation.objects.create(sampling_session=sampler, seq_id=None, **fields)
        if op.worker is not None:  # else it waits with its sampler
            dispatch.wake_worker(op.worker.queue, inserted=True)
        return op
    if idempotency_key is not None:
        del fields["tenant"]  # in the lookup
        fields.update(sampling_session=sampler, seq_id=seq_id)
    return _create_op(lookup, what, checked=True, **fields)


def new_sampler_id() -> str:
    return new_id("sampler")
