"""A training model's operations that save or load its weights: each is a training operation in
``seq_id`` order carrying its checkpoint plan (where a save goes and what seals it, what a load
opens); a model made by loading a checkpoint is created with the load as its first operation."""

from __future__ import annotations

from controlplane.errors import DomainError
from controlplane.tenants.models import Tenant
from controlplane.training_sessions.models import Checkpoint, Operation
from controlplane.training_sessions.selectors import checkpoint_by_path
from controlplane.training_sessions.services import checkpoint_plans
from controlplane.training_sessions.services.lora import optimizer_of, with_optimizer
from loopwright.types import (
    LoadWeightsRequest,
    SaveWeightsExternalRequest,
    SaveWeightsForSamplerRequest,
    SaveWeightsRequest,
)

from .sampling import new_sampler_id
from .training import model_create, request_payload, training_submit

EPHEMERAL_TTL_SECONDS = 24 * 3600


def save_weights_submit(*, tenant: Tenant, req: SaveWeightsRequest) -> Operation:
    """A state save (weights and optimizer), named by ``path`` or after its ``seq_id``."""
    name = checkpoint_plans.checkpoint_name(
        req.path, f"state-{req.seq_id}" if req.seq_id is not None else None
    )
    plan = checkpoint_plans.save_plan(
        kind=Checkpoint.Kind.TRAINING,
        name=name,
        overwrite=req.overwrite,
        ttl_seconds=req.ttl_seconds,
    )
    return _submit(tenant, req, Operation.Kind.SAVE_WEIGHTS, plan)


def save_weights_for_sampler_submit(
    *, tenant: Tenant, req: SaveWeightsForSamplerRequest
) -> Operation:
    """Sampler weights: named by ``path``, or, without one but with a
    ``sampling_session_seq_id``, ephemeral (the weights as of now, for a sampler the client
    uses at once, opened by the save itself)."""
    if req.path is None and req.sampling_session_seq_id is not None:
        name = checkpoint_plans.checkpoint_name(
            None, f"ephemeral-{req.seq_id}-{req.sampling_session_seq_id}"
        )
        plan = checkpoint_plans.save_plan(
            kind=Checkpoint.Kind.SAMPLER,
            name=name,
            overwrite=True,
            ttl_seconds=req.ttl_seconds or EPHEMERAL_TTL_SECONDS,
            sampler_id=new_sampler_id(),
        )
    else:
        name = checkpoint_plans.checkpoint_name(
            req.path, f"sampler-{req.seq_id}" if req.seq_id is not None else None, "sampler"
        )
        plan = checkpoint_plans.save_plan(
            kind=Checkpoint.Kind.SAMPLER,
            name=name,
            overwrite=False,
            ttl_seconds=req.ttl_seconds,
            merge=req.merge_weights,
        )
    return _submit(tenant, req, Operation.Kind.SAVE_WEIGHTS_FOR_SAMPLER, plan)


def save_weights_external_submit(*, tenant: Tenant, req: SaveWeightsExternalRequest) -> Operation:
    """Weights for use elsewhere: a sampler checkpoint saved with its merged model (its result
    is answered as ``external_weights``)."""
    if req.age_encryption_recipients:
        raise DomainError(
            "age_encryption_recipients: not offered; the files are sealed with the account's "
            "KMS key and downloaded by time-limited links (external_weights_urls)",
            field="age_encryption_recipients",
        )
    plan = checkpoint_plans.save_plan(
        kind=Checkpoint.Kind.SAMPLER,
        name=checkpoint_plans.checkpoint_name(req.path, "external"),
        overwrite=False,
        ttl_seconds=req.ttl_seconds,
        merge=True,
    )
    return training_submit(
        tenant=tenant,
        model_id=req.model_id,
        seq_id=req.seq_id,
        kind=Operation.Kind.SAVE_WEIGHTS_FOR_SAMPLER,
        payload={**request_payload(req), "external": True},
        plan=plan,
    )


def load_weights_submit(*, tenant: Tenant, req: LoadWeightsRequest) -> Operation:
    """Load a checkpoint into the live model ``req.model_id`` (whose optimizer family a load
    never changes)."""
    plan = checkpoint_plans.load_plan(
        tenant=tenant, path=req.path, optimizer=req.optimizer, family=_asked_family(req)
    )
    return _submit(tenant, req, Operation.Kind.LOAD_WEIGHTS, plan)


def new_model_shape(*, tenant: Tenant, req: LoadWeightsRequest) -> tuple[str, dict]:
    """The base model and LoRA config of a model made by loading ``req.path`` (a load without
    ``model_id``): the checkpoint's, unless the request names a base model. Its optimizer family
    is the checkpoint's when its optimizer state is loaded (``optimizer_config`` may only repeat
    it), else ``optimizer_config``'s (AdamW when not given)."""
    if req.session_id is None or req.model_seq_id is None:
        raise DomainError(
            "give model_id, or session_id and model_seq_id for a new model", field="model_id"
        )
    ckpt = checkpoint_by_path(tenant=tenant, tinker_path=req.path, field="path")
    base_model = req.base_model or ckpt.base_model
    lora = {k: v for k, v in ckpt.lora.items() if k != "alpha" or v is not None}
    asked, saved = _asked_family(req), optimizer_of(ckpt.lora)
    if req.optimizer and asked is not None and asked != saved:
        raise DomainError(
            f"optimizer_config: {req.path} holds {saved} optimizer state, which a model that "
            "resumes it keeps; load without the optimizer state to choose another",
            field="optimizer_config",
        )
    family = saved if req.optimizer else asked or "adamw"
    return base_model, with_optimizer(lora, family)


def _asked_family(req: LoadWeightsRequest) -> str | None:
    return req.optimizer_config.type if req.optimizer_config is not None else None


def load_new_model(
    *, tenant: Tenant, req: LoadWeightsRequest, base_model: str, lora: dict
) -> Operation:
    """A model made by loading a checkpoint (tinker SDK ≥ 0.38 resumes this way): created in
    session ``session_id`` as its ``model_seq_id``, with the id the SDK derives from both,
    shaped as ``new_model_shape`` says, with the checkpoint loaded before its first step."""
    plan = checkpoint_plans.load_plan(tenant=tenant, path=req.path, optimizer=req.optimizer)
    return model_create(
        tenant=tenant,
        session_id=req.session_id,
        model_seq_id=req.model_seq_id,
        base_model=base_model,
        lora=lora,
        user_metadata=req.user_metadata,
        model_id=f"{req.session_id}:train:{req.model_seq_id}",
        load=({"path": req.path, "optimizer": req.optimizer}, plan),
    )


def _submit(tenant: Tenant, req, kind: str, plan) -> Operation:
    return training_submit(
        tenant=tenant,
        model_id=req.model_id,
        seq_id=req.seq_id,
        kind=kind,
        payload=request_payload(req),
        plan=plan,
    )
