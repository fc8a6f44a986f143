"""Submitting operations: validate the session's state, make the row idempotent, wake the worker.

Each training request lands as an Operation with the client's ``seq_id``; ``(model, seq_id)`` is
unique, so a retried request returns the same row and another body with the same ``seq_id`` is a
409. The worker is woken after commit.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from controlplane import dispatch
from controlplane.fleet.models import BaseModel
from controlplane.fleet.services import Network
from controlplane.iam.sessions import session_may
from controlplane.kms import services as kms
from controlplane.registry.selectors import save_group_arn
from controlplane.storage import join_uri, location
from controlplane.tenants.models import Tenant

from ..errors import Conflict, NotActive, NotFound, SessionError, Unavailable
from ..models import Checkpoint, Operation, SamplingSession, Session, TrainingModel, new_id
from ..selectors import checkpoint_by_path, model_get, sampler_get, session_get
from . import placement
from .sessions import session_touch
from .storage import storage_root

OPEN_STATES = (Session.State.PENDING, Session.State.ACTIVE)
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
DEFAULT_ALPHA = 32.0
TOUCH_SECONDS = 5.0


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
    if op.worker is not None:  # else it waits with its model, and goes when the model is placed
        dispatch.wake_worker(op.worker.queue)
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
) -> Operation:
    session = session_get(tenant=tenant, session_id=session_id)
    _require_open(session)
    payload = {
        "base_model": base_model,
        "lora": lora,
        "model_seq_id": model_seq_id,
        "user_metadata": user_metadata,
    }
    existing = TrainingModel.objects.filter(session=session, model_seq_id=model_seq_id).first()
    if existing is not None:
        op = existing.operations.get(kind=Operation.Kind.CREATE_MODEL)
        return _existing_or_conflict(op, digest(payload), f"model_seq_id {model_seq_id}")
    if not BaseModel.objects.filter(name=base_model).exists():
        raise Unavailable(f"no worker has served {base_model!r}", field="base_model")
    lora = {**lora, "alpha": float(lora.get("alpha") or DEFAULT_ALPHA)}
    model = TrainingModel.objects.create(
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
        plan={"adapter": model.id, "lora": lora},
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
@transaction.atomic
def training_submit(
    *,
    tenant: Tenant,
    model_id: str,
    seq_id: int | None,
    kind: str,
    payload: dict,
    plan: dict | None = None,
) -> Operation:
    try:
        model = (
            TrainingModel.objects.select_for_update(of=("self",))
            .select_related("session", "worker")
            .get(tenant=tenant, id=model_id)
        )
    except TrainingModel.DoesNotExist:
        raise NotFound(f"model {model_id!r} not found", field="model_id") from None
    payload_digest = digest(payload)  # JSON-encodes the whole request: once
    existing = None
    if seq_id is not None:
        existing = Operation.objects.filter(model=model, seq_id=seq_id).first()
        if existing is not None and existing.payload_digest == payload_digest:
            return existing  # a retry: same answer whatever state the session is in now
    _require_ready(model)
    if seq_id is None:
        top = model.operations.aggregate(m=Max("seq_id"))["m"] or 0
        seq_id = top + 1
    elif seq_id < 1:
        raise SessionError(f"seq_id must be ≥ 1, got {seq_id}", field="seq_id")
    elif seq_id < model.next_seq:
        raise Conflict(
            f"seq_id {seq_id} is behind the model (next is {model.next_seq})", field="seq_id"
        )
    plan = {"adapter": model.id, **(plan(model) if callable(plan) else plan or {})}
    _touch(model)
    return _create_op(
        {"model": model, "seq_id": seq_id},
        f"seq_id {seq_id} of model {model.id}",
        existing=existing,
        checked=True,
        tenant=tenant,
        session=model.session,
        worker=model.worker,
        kind=kind,
        payload=payload,
        payload_digest=payload_digest,
        plan=plan,
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
    model = TrainingModel.objects.filter(tenant=tenant, id=model_id).first()
    if model is None or seq_id < model.next_seq or model.operations.filter(seq_id=seq_id).exists():
        return
    try:
        with transaction.atomic():
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
    except IntegrityError:
        return
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


def checkpoint_name(name: str | None, fallback: str) -> str:
    name = name or fallback
    if not NAME_RE.match(name):
        raise SessionError(
            "must be 1–128 characters of letters, digits, '.', '_' or '-', starting with a letter or digit",
            field="path",
        )
    return name


def checkpoint_location(model: TrainingModel, kind: str, name: str) -> tuple[str, str]:
    """(tinker path, storage URI) of a checkpoint: under the session's ``s3_output_path``, or
    the local storage folder."""
    folder = "weights" if kind == Checkpoint.Kind.TRAINING else "sampler_weights"
    key = f"{model.tenant_id}/{model.id}/{folder}/{name}"
    uri = join_uri(storage_root(model.session.platform), key)
    return f"tinker://{model.id}/{folder}/{name}", uri


def save_plan(
    *,
    kind: str,
    name: str,
    overwrite: bool,
    ttl_seconds: int | None,
    merge: bool = False,
    sampler_id: str | None = None,
):
    """A plan factory for save_weights / save_weights_for_sampler, resolved against the model.

    The files are sealed with the session's KMS key (or the tenant's default key).
    """

    def plan(model: TrainingModel) -> dict:
        tinker_path, storage_uri = checkpoint_location(model, kind, name)
        if not overwrite and Checkpoint.objects.filter(tinker_path=tinker_path).exists():
            raise Conflict(
                f"checkpoint {tinker_path} exists (pass overwrite to replace it)", field="path"
            )
        expires = None
        if ttl_seconds:
            expires = (timezone.now() + timedelta(seconds=ttl_seconds)).isoformat()
        sealing = kms.save_sealing(
            tenant=model.tenant,
            key_arn=model.session.platform.get("kms_key_arn"),
            resource=tinker_path,
        )
        # the session writes the checkpoint: its role must be allowed to use the key
        session_may(
            model.tenant,
            model.session.platform.get("role_arn"),
            "kms:GenerateDataKey",
            sealing["key_arn"],
        )
        # and to register it as the next version of its model package group
        session_may(
            model.tenant,
            model.session.platform.get("role_arn"),
            "registry:CreateModelPackage",
            save_group_arn(model),
        )
        return {
            "checkpoint": {
                "kind": kind,
                "name": name,
                "tinker_path": tinker_path,
                "storage_path": location(storage_uri),
                "storage_uri": storage_uri,
                "expires_at": expires,
                "merge": merge,
                "sealing": sealing,
            },
            "sampler_id": sampler_id,
        }

    return plan


def load_plan(*, tenant: Tenant, path: str, optimizer: bool):
    def plan(model: TrainingModel) -> dict:
        ckpt = checkpoint_by_path(tenant=tenant, tinker_path=path)
        if optimizer and ckpt.kind != Checkpoint.Kind.TRAINING:
            raise SessionError(
                f"{path} holds sampler weights without optimizer state; load training state "
                "(saved with save_state) to resume with the optimizer",
                field="path",
            )
        if ckpt.base_model != model.base_model:
            raise SessionError(
                f"{path} was trained on {ckpt.base_model}, this model is {model.base_model}",
                field="path",
            )
        return {
            "load": {
                "storage_path": ckpt.storage_path,
                "optimizer": optimizer,
                "tinker_path": path,  # echoed as the client named it (a path or a version ARN)
                "sealing": _opening(tenant, ckpt, field="path", session=model.session),
                **_stored(ckpt),
            }
        }

    return plan


def _stored(ckpt: Checkpoint | None) -> dict:
    """Where the worker fetches a checkpoint's objects and the manifest it checks them against
    (nothing for one saved before manifests were kept: it reads the local ``storage_path``)."""
    if ckpt is None or ckpt.manifest is None:
        return {}
    return {"storage_uri": ckpt.storage_uri, "manifest": ckpt.manifest}


def _opening(
    tenant: Tenant, ckpt: Checkpoint | None, *, field: str, session: Session
) -> dict | None:
    """How the worker opens a checkpoint's sealed files (None: saved before sealing existed).

    The reading session's role must be allowed to decrypt with the key that sealed them.
    """
    if ckpt is None or not ckpt.kms_key_arn:
        return None
    sealing = kms.load_sealing(
        tenant=tenant, key_arn=ckpt.kms_key_arn, resource=ckpt.tinker_path, field=field
    )
    session_may(tenant, session.platform.get("role_arn"), "kms:Decrypt", sealing["key_arn"])
    return sealing


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
            return existing
    _require_open(session)
    network = placement.session_network(session)
    fields: dict = {"tenant": tenant, "session": session, "sampling_session_seq_id": seq}
    if model_id:
        model = model_get(tenant=tenant, model_id=model_id)
        _require_ready(model)
        if model.worker is None:
            raise Conflict(
                f"model {model.id} is not on a worker yet ({model.status_reason})",
                field="model_id",
            )
        fields.update(base_model=model.base_model, live_model=model, worker=model.worker)
    elif model_path:
        ckpt = checkpoint_by_path(tenant=tenant, tinker_path=model_path, field="model_path")
        _opening(tenant, ckpt, field="model_path", session=session)  # refuse now if it cannot
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


def _sampler_worker(base_model: str, network: Network, prefer=None):
    """A live worker of ``base_model`` on the session's network, ``prefer`` if it is one."""
    from controlplane.fleet.services import live_workers

    serving = list(live_workers().filter(base_model_id=base_model).order_by("name"))
    workers = [w for w in serving if network.admits(w)]
    if prefer is not None and prefer in workers:
        return prefer
    if not workers:
        where = f" for this session: it needs {network.wanted()}" if serving else ""
        raise Unavailable(f"no live worker serves {base_model!r}{where}", field="base_model")
    return workers[0]


def sampler_plan(sampler: SamplingSession, *, tenant: Tenant) -> dict:
    if sampler.live_model_id:
        return {"adapter": sampler.live_model_id}
    if sampler.storage_path:
        ckpt = Checkpoint.objects.filter(tenant=tenant, tinker_path=sampler.model_path).first()
        return {
            "adapter": f"sampler:{sampler.id}",
            "storage_path": sampler.storage_path,
            "sealing": _opening(tenant, ckpt, field="sampling_session_id", session=sampler.session),
            **_stored(ckpt),
        }
    return {"adapter": None}


@transaction.atomic
def sample_submit(
    *, tenant: Tenant, sampling_session_id: str, seq_id: int | None, payload: dict
) -> Operation:
    sampler = sampler_get(tenant=tenant, sampling_session_id=sampling_session_id)
    lookup = {"sampling_session": sampler, "seq_id": seq_id if seq_id is not None else None}
    if seq_id is not None:
        existing = Operation.objects.filter(**lookup).first()
        if existing is not None:
            return _existing_or_conflict(
                existing, digest(payload), f"seq_id {seq_id} of sampler {sampler.id}"
            )
    _require_open(sampler.session)
    if sampler.live_model_id:
        _require_ready(sampler.live_model)
    session_touch(sampler.session)
    fields = dict(
        tenant=tenant,
        session=sampler.session,
        worker=sampler.worker,
        kind=Operation.Kind.SAMPLE,
        payload=payload,
        payload_digest=digest(payload),
        plan=sampler_plan(sampler, tenant=tenant),
    )
    if seq_id is None:
        op = Operation.objects.create(sampling_session=sampler, seq_id=None, **fields)
        dispatch.wake_worker(op.worker.queue)
        return op
    return _create_op(lookup, f"seq_id {seq_id} of sampler {sampler.id}", **fields)


def new_sampler_id() -> str:
    return new_id("sampler")
