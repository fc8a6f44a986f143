"""Samplers and their sample operations: open a sampler (on a live model, a saved checkpoint or
the base model), submit samples (idempotent by the sampler's ``seq_id`` or an
``Idempotency-Key``), and what the worker needs to sample."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from controlplane import dispatch
from controlplane.audit.models import AuditEvent
from controlplane.audit.services import audited_transaction
from controlplane.budgets.admission import admit
from controlplane.budgets.scopes import has_hard_budgets
from controlplane.errors import DomainError
from controlplane.fleet.models import Worker
from controlplane.fleet.selectors import base_model_require
from controlplane.fleet.services import Network
from controlplane.iam.access import enforce
from controlplane.iam.evaluation import Decision
from controlplane.tenants.models import Tenant
from controlplane.training_sessions.errors import Conflict, NotFound, Unavailable
from controlplane.training_sessions.models import (
    Checkpoint,
    Operation,
    SamplingSession,
    Session,
    new_id,
)
from controlplane.training_sessions.selectors import (
    checkpoint_by_path,
    model_get,
    sampler_get,
    session_get,
)
from controlplane.training_sessions.services import (
    context,
    images,
    placement,
    request_images,
    vocabulary,
)
from controlplane.training_sessions.services.checkpoint_plans import opening, stored_fields
from controlplane.training_sessions.services.recordings import recordings_quota_check
from controlplane.training_sessions.services.sessions import session_touch

from . import sample_statement
from .admission import (
    TOUCH_SECONDS,
    create_op,
    digest,
    existing_or_conflict,
    require_open,
    require_ready,
)


@transaction.atomic
def sampler_create(
    *,
    tenant: Tenant,
    session_id: str,
    seq: int | None,
    base_model: str | None,
    model_path: str | None,
    model_id: str | None,
    queue: bool = False,
) -> SamplingSession:
    """Open a sampler on a live model, saved sampler weights or a base model. When no live
    worker reaches the session's network, ``queue``: it waits in the placement queue (its
    samples with it) until one does; else that is refused (503, for a caller that cannot wait).
    Without any live worker of its base model it waits either way, as after a worker is lost."""
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
    require_open(session)
    network = placement.session_network(session)
    fields: dict = {"tenant": tenant, "session": session, "sampling_session_seq_id": seq}
    asked = session.platform.get("context_length")
    if base_model:
        base_model, asked = context.base_and_context(base_model, asked)
    if model_id:
        model = model_get(tenant=tenant, model_id=model_id)
        require_ready(model)
        # on its model's worker; with the model while it waits for one
        fields.update(base_model=model.base_model, live_model=model, worker=model.worker)
        asked = model.context_length if model.context_length is not None else asked
    elif model_path:
        ckpt = checkpoint_by_path(tenant=tenant, tinker_path=model_path, field="model_path")
        opening(tenant, ckpt, field="model_path", session=session)  # refuse now if it cannot
        worker = _sampler_worker(ckpt.base_model, network, queue, prefer=ckpt.model.worker)
        fields.update(
            base_model=ckpt.base_model,
            model_path=ckpt.tinker_path,  # a model package ARN is stored as what it names
            storage_path=ckpt.storage_path,
            worker=worker,
        )
    elif base_model:
        fields.update(base_model=base_model, worker=_sampler_worker(base_model, network, queue))
    else:
        raise DomainError("give base_model, model_path or model_id", field="base_model")
    fields["context_length"] = context.context_checked(
        base_model=fields["base_model"], context_length=asked
    )
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
    name = context.base_name(base_model or "")  # ``<base>:peft:<n>`` names the base too
    return not sampler.live_model_id and not sampler.model_path and sampler.base_model == name


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


def _sampler_worker(base_model: str, network: Network, queue: bool, prefer=None) -> Worker | None:
    """A live worker of ``base_model`` on the session's network, ``prefer`` if it is one; None
    while no worker is live for a base model one has served, or (``queue``) none reaches the
    network: the sampler waits in the placement queue, its requests with it. As placement, it
    chooses only workers heard from lately (``fleet.services.placeable_workers``): with only
    silent ones, the sampler waits as with none."""
    from controlplane.fleet.services import placeable_workers

    serving = list(placeable_workers().filter(base_model_id=base_model).order_by("name"))
    workers = [w for w in serving if network.admits(w)]
    # workers that hold the base whole first, then the coordinators of sharded groups
    takes = sorted(
        (w for w in workers if placement.takes_samplers(w)), key=lambda w: w.shard_ranks > 1
    )
    if prefer is not None and prefer in takes:
        return prefer
    if takes:
        return takes[0]
    if workers:  # none holds the base whole: a sharded group (formed now if need be), or wait
        return placement.sharded_home(base_model, network, workers)
    if serving and not queue:
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
    request_id: str | None = None,
    api_key: str = "",
) -> Operation:
    """A sample request. A retry (the same ``seq_id`` of the sampler, or the same
    ``idempotency_key`` in the tenant) gets its operation back, whatever the session's state
    now; the same key or ``seq_id`` with another request (``request_digest``, by default the
    payload's) is a 409. ``request_id``: the new operation's id (one is made if None).
    ``api_key``: the visible prefix of the caller's key (or its access key id), which the
    operation and its usage record and its key's budgets count it against."""
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
            return existing_or_conflict(existing, request_digest, what)
    require_open(sampler.session)
    if sampler.live_model_id:
        require_ready(sampler.live_model)
    images.images_check(
        base_model=sampler.base_model, inputs=iter([("prompt", payload.get("prompt") or {})])
    )
    highest = vocabulary.highest_sampled(payload)
    vocabulary.vocab_check(base_model=sampler.base_model, highest=highest, field="prompt")
    vocabulary.vocab_check(
        base_model=sampler.base_model,
        highest=vocabulary.highest_biased(payload),
        field="sampling_params.logit_bias",
    )
    payload = context.sample_fits(context_length=sampler.context_length, payload=payload)
    budget_hold = admit(
        tenant=tenant,
        session=sampler.session,
        api_key=api_key,
        kind=Operation.Kind.SAMPLE,
        payload=payload,
        base_model=sampler.base_model,
    )
    if payload.get("record_stability_info"):
        recordings_quota_check(tenant=tenant)
    beat = sampler.session.last_heartbeat_at  # a sign of life, written as a step's is
    if beat is None or (timezone.now() - beat).total_seconds() > TOUCH_SECONDS:
        session_touch(sampler.session)
    fields = dict(
        tenant=tenant,
        session=sampler.session,
        worker=sampler.worker,
        kind=Operation.Kind.SAMPLE,
        payload=payload,
        payload_digest=request_digest,
        plan=sampler_plan(sampler, tenant=tenant),
        api_key=api_key,
    )
    if request_id is not None:
        fields["id"] = request_id
    fields = request_images.fields_sealed(fields)  # its images (if any) never stored in clear
    if idempotency_key is None and seq_id is None:
        op = Operation.objects.create(sampling_session=sampler, seq_id=None, **fields)
        budget_hold.hold(op)
        if op.worker is not None:  # else it waits with its sampler
            dispatch.wake_worker(op.worker.queue, inserted=True)
        return op
    if idempotency_key is not None:
        del fields["tenant"]  # in the lookup
        fields.update(sampling_session=sampler, seq_id=seq_id)
    op = create_op(lookup, what, checked=True, **fields)
    budget_hold.hold(op)
    return op


def submit(
    *,
    tenant: Tenant,
    sampling_session_id: str,
    seq_id: int | None,
    payload: dict,
    access: tuple[Decision, AuditEvent],
    request_id: str | None = None,
    answer=None,
):
    """A sample request with the caller's IAM decision on its sampler and that decision's audit
    row, not yet written (``access``, from ``iam.access.decide``): ``answer(op)`` (by default
    the operation) for the operation inserted once (a retry gets its earlier one back).

    Taken in one statement where it can be (``sample_in_one_statement``); else in one
    transaction with the audit row (and whatever ``answer`` writes): refused if the decision
    says no (403), then whatever ``sample_submit`` finds (404, 409, 402, 400, …)."""
    decision, audit = access
    answer = answer or (lambda op: op)
    op = sample_in_one_statement(
        tenant=tenant,
        sampling_session_id=sampling_session_id,
        seq_id=seq_id,
        payload=payload,
        audit=audit,
        request_id=request_id,
    )
    if op is not None:
        return answer(op)
    with audited_transaction():  # the audit row and the operation: one commit
        enforce(decision, audit)
        op = sample_submit(
            tenant=tenant,
            sampling_session_id=sampling_session_id,
            seq_id=seq_id,
            payload=payload,
            request_id=request_id,
            api_key=audit.api_key,
        )
        return answer(op)


def sample_in_one_statement(
    *,
    tenant: Tenant,
    sampling_session_id: str,
    seq_id: int | None,
    payload: dict,
    audit: AuditEvent,
    request_id: str | None = None,
) -> Operation | None:
    """A sample submitted in one statement together with ``audit``, its request's IAM
    decision (``sample_statement``): the operation, committed. None when it was not taken and
    nothing was written: not allowed, not PostgreSQL or inside a transaction, an
    ``Idempotency-Key`` (the portable path here), a hard budget to admit it against, recorded
    stability info (the recordings' quota), images to check against the base model, no
    ``max_tokens`` (the sampler's context writes it in), or whatever the statement found in its
    way; the request then goes the portable way (``sample_submit``), which answers exactly as
    if this had not been tried."""
    if not (sample_statement.available() and audit.allowed):
        return None
    params = payload.get("sampling_params") or {}
    prompt = payload.get("prompt") or {}
    if (
        payload.get("record_stability_info")
        or images.has_images(prompt)
        or not isinstance(params.get("max_tokens"), int)
        or has_hard_budgets(tenant)
    ):
        return None
    highest = vocabulary.highest_sampled(payload)
    biased = vocabulary.highest_biased(payload)
    if biased is not None and (highest is None or biased > highest):
        highest = biased
    return sample_statement.submit(
        tenant=tenant,
        sampling_session_id=sampling_session_id,
        seq_id=seq_id,
        payload=payload,
        payload_digest=digest(payload),
        audit=audit,
        highest_token=highest,
        needs_context=context.longest_input({"data": [{"model_input": prompt}]})
        + params["max_tokens"],
        request_id=request_id,
    )


def new_sampler_id() -> str:
    return new_id("sampler")
