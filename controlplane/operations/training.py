"""A training model's operations: create and unload it, submit its training requests in
``seq_id`` order, and record a request refused on arrival under its ``seq_id``.

Each training request lands as an Operation with the client's ``seq_id``; ``(model, seq_id)`` is
unique, so a retried request returns the same row and another body with the same ``seq_id`` is a
409. The worker is woken after commit. A training step enters through ``submit``, which takes it
in one statement where that can be done (``submit_step``, ``step_statement``), else the portable
way (``training_submit``).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

from django.db import connection, transaction
from django.db.models import Max
from django.utils import timezone
from pydantic import ValidationError

from controlplane import dispatch, row_mapper
from controlplane.audit.models import AuditEvent
from controlplane.audit.services import audited_transaction
from controlplane.budgets.admission import admit
from controlplane.budgets.scopes import has_hard_budgets
from controlplane.errors import DomainError, Unreadable
from controlplane.fleet.models import Worker
from controlplane.fleet.selectors import base_model_require
from controlplane.iam.access import enforce
from controlplane.iam.evaluation import Decision
from controlplane.tenants.models import Tenant
from controlplane.training_sessions.errors import Conflict, NotActive, NotFound
from controlplane.training_sessions.models import Operation, Session, TrainingModel, new_id
from controlplane.training_sessions.selectors import session_get
from controlplane.training_sessions.services import (
    context,
    images,
    placement,
    request_images,
    vocabulary,
)
from controlplane.training_sessions.services.lora import lora_checked, projector_checked
from controlplane.training_sessions.services.provenance import provenance_resolve
from controlplane.training_sessions.services.sessions import session_touch
from loopwright.types import ForwardBackwardRequest, ForwardRequest, OptimStepRequest

from . import ordering, step_checks, step_statement
from .admission import (
    TOKEN_KINDS,
    TOUCH_SECONDS,
    create_op,
    digest,
    existing_or_conflict,
    require_open,
    require_ready,
    retry_key,
)
from .replicas import replicas_checked
from .sampling import sampler_seq_free

DEFAULT_ALPHA = 32.0
# the requests of a training loop, which a submit takes in one statement where it can, and the
# wire type of each
STEP_REQUESTS: dict[str, type[ForwardRequest | ForwardBackwardRequest | OptimStepRequest]] = {
    Operation.Kind.FORWARD: ForwardRequest,
    Operation.Kind.FORWARD_BACKWARD: ForwardBackwardRequest,
    Operation.Kind.OPTIM_STEP: OptimStepRequest,
}
STEP_KINDS = frozenset(STEP_REQUESTS)


# -- models ----------------------------------------------------------------------------------
def create_model_conditions(*, base_model: str, lora: dict, replicas: int = 1) -> dict:
    """The condition keys a ``sessions:CreateModel`` request is authorized with, whichever way
    the model is made (create_model, load_weights into a new model, the dashboard)."""
    return {
        "sessions:BaseModel": base_model,
        "sessions:LoraRank": int(lora.get("rank", 32)),
        "sessions:Replicas": replicas,
    }


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
    replicas: int = 1,
    context_length: int | None = None,
) -> Operation:
    """Create a model (``model_id``, or a fresh id) as operation 0 of its session's
    ``model_seq_id``, to train on ``replicas`` workers (data parallel; ``replicas_checked``),
    with a context of ``context_length`` tokens (or what ``<base>:peft:<n>`` names, or the
    session's, else the base model's maximum; ``services.context``). ``load``: the request and
    plan of a checkpoint to load into it in the same operation (a model made by
    ``load_weights``), before any ``seq_id`` is taken."""
    session = session_get(tenant=tenant, session_id=session_id)
    require_open(session)
    payload = {
        "base_model": base_model,
        "lora": lora,
        "model_seq_id": model_seq_id,
        "user_metadata": user_metadata,
        # only when asked for: a request of one replica digests as it always did, so a retry
        # of one sent before replicas existed is still recognised
        **({"replicas": replicas} if replicas != 1 else {}),
        **({"context_length": context_length} if context_length is not None else {}),
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
        return existing_or_conflict(op, digest(payload), f"model_seq_id {model_seq_id}")
    lora_checked(lora)
    base_model, context_length = context.base_and_context(base_model, context_length)
    base_model_require(base_model)
    projector_checked(lora, base_model)
    if context_length is None:  # the session's, if it asked for one
        context_length = session.platform.get("context_length")
    context_length = context.context_checked(base_model=base_model, context_length=context_length)
    replicas = replicas_checked(tenant=tenant, base_model=base_model, replicas=replicas)
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
        replicas=replicas,
        context_length=context_length,
        user_metadata=user_metadata,
        worker=None,
        placement=TrainingModel.Placement.WAITING_FOR_WORKER,
        next_seq=0,
    )
    session_touch(session)
    op = create_op(
        {"model": model, "seq_id": 0},
        "create_model",
        tenant=tenant,
        session=session,
        worker=None,
        kind=Operation.Kind.CREATE_MODEL,
        payload=payload,
        payload_digest=digest(payload),
        plan={
            "adapter": model.id,
            "lora": lora,
            "replicas": replicas,
            **(load[1](model) if load else {}),
        },
    )
    placement.model_place_new(model)  # or it waits, and its operations queue up
    return op


@transaction.atomic
def model_unload(*, tenant: Tenant, model: TrainingModel, ending: bool = False) -> Operation:
    """Unload after everything already submitted; later requests for the model are refused."""
    model = TrainingModel.objects.select_for_update().get(pk=model.pk)
    if not ending:
        require_open(model.session)
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
    return create_op(
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
def request_payload(req) -> dict:
    """What a training request's operation stores: its wire fields but those naming where and
    when it runs (``model_id``, ``seq_id``) and its ``type``."""
    return req.model_dump(mode="json", exclude={"seq_id", "model_id", "type"})


def step_payload(tenant: Tenant, kind: str, req) -> dict:
    """A training step's payload: its request's (``request_payload``), with the provenance of
    its datums checked against the session's recorded sequences and, for a loss that reads
    them, what it takes from them (``provenance_resolve``)."""
    payload = request_payload(req)
    if kind == Operation.Kind.OPTIM_STEP:
        return payload
    return provenance_resolve(tenant=tenant, model_id=req.model_id, kind=kind, payload=payload)


def submit(
    *,
    tenant: Tenant,
    kind: str,
    body: object,
    access: tuple[Decision, AuditEvent],
    request_id: str | None = None,
) -> Operation:
    """A training step (a ``STEP_KINDS`` request) from its wire ``body``, with the caller's IAM
    decision on its model and that decision's audit row, not yet written (``access``, from
    ``iam.access.decide``): the operation, inserted once (a retry gets its earlier one back).

    Taken in one statement where it can be (``submit_step``); else the portable way, in one
    transaction with the audit row: refused if the decision says no (403), then if the body is
    not a ``kind`` request (400), then whatever ``training_submit`` finds (404, 409, 402, …).
    A refused request still takes its ``seq_id`` (``training_reject``). ``request_id``: the
    operation's id, if it is a new one (a waiter may be listening for it already)."""
    decision, audit = access  # the audit row names the key that made the request
    try:
        if (op := _in_one_statement(tenant, kind, body, audit, request_id)) is not None:
            return op
        with audited_transaction():  # the audit row and the operation: one commit
            enforce(decision, audit)
            if not isinstance(body, dict):
                raise Unreadable("the request body must be a JSON object")
            req = STEP_REQUESTS[kind].model_validate(body)
            return training_submit(
                tenant=tenant,
                model_id=req.model_id,
                seq_id=req.seq_id,
                kind=kind,
                payload=step_payload(tenant, kind, req),
                request_id=request_id,
                api_key=audit.api_key,
            )
    except (DomainError, ValidationError) as exc:
        refused_on_arrival(tenant=tenant, kind=kind, body=body, exc=exc)
        raise


def _in_one_statement(
    tenant: Tenant, kind: str, body: object, audit: AuditEvent, request_id: str | None
) -> Operation | None:
    """``body`` offered to ``submit_step`` if it may take it; None if it did not."""
    if not (one_statement_steps(kind) and audit.allowed and isinstance(body, dict)):
        return None
    try:
        req = STEP_REQUESTS[kind].model_validate(body)
    except ValidationError:
        return None  # refused the portable way, which says why
    return submit_step(
        tenant=tenant,
        model_id=req.model_id,
        seq_id=req.seq_id,
        kind=kind,
        payload=step_payload(tenant, kind, req),
        audit=audit,
        request_id=request_id,
    )  # the audit row names the key, which the statement records on the operation


def one_statement_steps(kind: str) -> bool:
    """Whether a ``kind`` request is tried with ``submit_step`` here: a training step,
    on PostgreSQL, outside any transaction (its statement commits by itself)."""
    return kind in STEP_KINDS and step_statement.available()


def submit_step(
    *,
    tenant: Tenant,
    model_id: str,
    seq_id: int | None,
    kind: str,
    payload: dict,
    audit: AuditEvent,
    request_id: str | None = None,
) -> Operation | None:
    """A training step (``one_statement_steps``) submitted in one statement together with
    ``audit``, its request's IAM decision: the operation, committed. None when it was not
    taken and nothing was written (not allowed, no ``seq_id``, a hard budget to admit it
    against, images to check, or whatever the statement found in its way): the request then goes the portable
    way (``training_submit``, in the request's audited transaction), which answers exactly as
    if this had not been tried."""
    if not one_statement_steps(kind) or not audit.allowed:
        return None
    if not isinstance(seq_id, int) or seq_id < 1:
        return None
    if kind in TOKEN_KINDS and has_hard_budgets(tenant):
        return None
    batch = payload.get("forward_input") or payload.get("forward_backward_input")
    if any(images.has_images(m) for _, m in images.batch_inputs(batch, "data")):
        return None  # images are checked against the base model the portable way
    return step_statement.submit(
        tenant=tenant,
        model_id=model_id,
        seq_id=seq_id,
        kind=kind,
        payload=payload,
        audit=audit,
        request_id=request_id,
        highest_token=vocabulary.highest_token(batch),
        longest_input=context.longest_input(batch),
        optimizer=step_checks.step_family(kind, payload),
    )


@transaction.atomic(savepoint=False)  # inside the request's transaction: no savepoint needed
def training_submit(
    *,
    tenant: Tenant,
    model_id: str,
    seq_id: int | None,
    kind: str,
    payload: dict,
    plan: dict | None = None,
    request_id: str | None = None,
    api_key: str = "",
) -> Operation:
    """Insert the operation (``request_id``, or a fresh id) under the model's row lock, in two
    statements: the lock (which also reads the model's session and worker, and any earlier
    request with this ``seq_id``), then the insert (whose trigger wakes the worker on
    PostgreSQL). A token-consuming request is admitted against the hard budgets it counts
    against first (made by ``api_key``, the caller's key prefix)."""
    locked = _model_locked(tenant=tenant, model_id=model_id, seq_id=seq_id)
    if locked is None:
        raise NotFound(f"model {model_id!r} not found", field="model_id")
    model, existing_id, existing_digest = locked
    payload_digest = digest(retry_key(kind, payload))  # JSON-encodes the whole request: once
    if existing_id is not None and existing_digest == payload_digest:
        # a retry: same answer whatever state the session is in now
        return Operation.objects.select_related("worker").get(pk=existing_id)
    require_ready(model)
    step_checks.optimizer_matches(kind, payload, model.lora)
    if kind in TOKEN_KINDS:
        key = "forward_input" if kind == Operation.Kind.FORWARD else "forward_backward_input"
        images.images_check(
            base_model=model.base_model,
            inputs=images.batch_inputs(payload.get(key), f"{key}.data"),
        )
        vocabulary.vocab_check(
            base_model=model.base_model,
            highest=vocabulary.highest_token(payload.get(key)),
            field=f"{key}.data",
        )
        context.inputs_fit(
            context_length=model.context_length, batch=payload.get(key), field=f"{key}.data"
        )
        budget_hold = admit(
            tenant=tenant,
            session=model.session,
            api_key=api_key,
            kind=kind,
            payload=payload,
            base_model=model.base_model,
        )
    if seq_id is None:
        top = model.operations.aggregate(m=Max("seq_id"))["m"] or 0
        seq_id = top + 1
    elif seq_id < 1:
        raise DomainError(f"seq_id must be ≥ 1, got {seq_id}", field="seq_id")
    elif seq_id < model.next_seq:
        raise Conflict(
            f"seq_id {seq_id} is behind the model (next is {model.next_seq})", field="seq_id"
        )
    else:
        ordering.window_check(model, seq_id)
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
        # A request that took this seq_id while the lock was waited for (the look above missed
        # it) holds this sampler number itself: answer it as a retry, not as the number's thief.
        racing = Operation.objects.select_related("worker").filter(model=model, seq_id=seq_id)
        taken = racing.first()
        if taken is not None:
            return existing_or_conflict(
                taken, payload_digest, f"seq_id {seq_id} of model {model.id}"
            )
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
        api_key=api_key,
    )
    op.id = request_id or new_id("req")
    request_images.op_sealed(op)  # its images (if any) sealed, never stored in clear
    # Every insert of a model's operation holds the model's row lock. A request that took this
    # seq_id while the lock was waited for is not in the look above (its snapshot is older):
    # the insert steps aside, and it is answered as a retry or a conflict.
    if not row_mapper.insert(op, unless_conflict=True):
        existing = Operation.objects.select_related("worker").get(model=model, seq_id=seq_id)
        return existing_or_conflict(
            existing, payload_digest, f"seq_id {seq_id} of model {model.id}"
        )
    if kind in TOKEN_KINDS:
        budget_hold.hold(op)
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
    """  # noqa: S608 — identifiers from the models' metadata, every value a bound parameter
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


def refused_on_arrival(*, tenant: Tenant, kind: str, body: object, exc: Exception) -> None:
    """Record a training request refused on arrival (``exc``): the one place that does, for a
    body that did not parse, did not validate or was refused by ``submit``. It takes the seq_id
    its ``body`` names (``training_reject``); a protobuf body that parsed but did not validate
    names its model, seq_id and kind on ``exc`` itself."""
    known = body if isinstance(body, dict) else {}
    training_reject(
        tenant=tenant,
        model_id=getattr(exc, "model_id", None) or known.get("model_id"),
        seq_id=getattr(exc, "seq_id", None) or known.get("seq_id"),
        kind=getattr(exc, "kind", None) or kind,
        error=f"refused on arrival: {getattr(exc, 'detail', exc)}",
    )


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
        if not ordering.in_window(model.next_seq, seq_id):
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
