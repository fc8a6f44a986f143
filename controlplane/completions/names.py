"""Model names as every chat face takes them, resolved to the sampler that serves them, and
the base model's tokenizer and context length.

Names: ``sampler-…`` (a sampler), ``model-…`` (a training model's current weights), ``sess-…``
(a session's newest sampler), a ``tinker://`` checkpoint path or a model package version ARN (a
sampler on the saved weights, made on first use in an open session). Another tenant's name is
not found, exactly like a name that does not exist.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from controlplane.fleet.models import BaseModel
from controlplane.fleet.selectors import base_model_require
from controlplane.fleet.services import live_workers
from controlplane.iam.resources import checkpoint_arn, sampler_arn
from controlplane.operations import admission, sampling
from controlplane.tenants.models import Tenant
from controlplane.training_sessions import selectors
from controlplane.training_sessions.errors import NotActive, NotFound
from controlplane.training_sessions.models import SamplingSession, Session, TrainingModel

from . import rendering
from .errors import ModelNotFound

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

Authorize = Callable[[str, str], None]  # (action, resource ARN): raises AccessDenied
OPEN = admission.OPEN_STATES
CHECKPOINT_PREFIXES = ("tinker://", "arn:")


@contextmanager
def _as_model_not_found(name: str) -> Iterator[None]:
    try:
        yield
    except NotFound:
        raise ModelNotFound(name) from None


def model_sampler(*, tenant: Tenant, name: str, authorize: Authorize) -> SamplingSession:
    """The sampler that serves ``name`` to the caller; another tenant's name is not found."""
    with _as_model_not_found(name):
        if name.startswith(CHECKPOINT_PREFIXES):
            sampler = _checkpoint_sampler(tenant, name, authorize)
        elif name.startswith("sampler-"):
            sampler = selectors.sampler_get(tenant=tenant, sampling_session_id=name)
        elif name.startswith("model-"):
            model = selectors.model_get(tenant=tenant, model_id=name)
            sampler = _live_sampler(tenant, model, authorize)
        elif name.startswith("sess-"):
            session = selectors.session_get(tenant=tenant, session_id=name)
            newest = _newest_sampler(tenant, session, authorize)
            if newest is None:
                raise ModelNotFound(name)
            sampler = newest
        else:
            raise ModelNotFound(name)
    authorize("sessions:Sample", sampler_arn(tenant, sampler.id))
    return sampler


def _live_sampler(tenant: Tenant, model: TrainingModel, authorize: Authorize) -> SamplingSession:
    """A sampler on the model's adapter as it trains (one is made on first use)."""
    sampler = (
        SamplingSession.objects.filter(tenant=tenant, live_model=model, worker_id=model.worker_id)
        .order_by("-created_at")
        .first()
    )
    if sampler is None:
        authorize("sessions:CreateSamplingSession", sampler_arn(tenant, "*"))
        sampler = sampling.sampler_create(
            tenant=tenant,
            session_id=model.session_id,
            seq=None,
            base_model=None,
            model_path=None,
            model_id=model.id,
        )
    return sampler


def _newest_sampler(
    tenant: Tenant, session: Session, authorize: Authorize
) -> SamplingSession | None:
    """The session's newest sampler; without one, a sampler on its newest ready model."""
    sampler = session.sampling_sessions.order_by("-created_at", "-id").first()
    if sampler is not None:
        return sampler
    model = session.models.filter(state=TrainingModel.State.READY).order_by("-created_at").first()
    if model is None:
        return None
    return _live_sampler(tenant, model, authorize)


def _checkpoint_sampler(tenant: Tenant, path: str, authorize: Authorize) -> SamplingSession:
    """A sampler on saved weights: one already open on them, else a new one in the checkpoint's
    own session or, once that ended, in the account's newest open session."""
    ckpt = selectors.checkpoint_by_path(tenant=tenant, tinker_path=path, field="model")
    authorize("sessions:CreateChatCompletion", checkpoint_arn(tenant, ckpt.model_id, ckpt.name))
    sampler = (
        SamplingSession.objects.filter(
            tenant=tenant,
            model_path=ckpt.tinker_path,
            storage_path=ckpt.storage_path,  # not a sampler on weights the path held before
            session__state__in=OPEN,
            worker__in=live_workers(),
        )
        .order_by("-created_at")
        .first()
    )
    if sampler is not None:
        return sampler
    session: Session | None = ckpt.model.session
    if session is None or session.state not in OPEN:
        session = (
            Session.objects.filter(tenant=tenant, state__in=OPEN).order_by("-created_at").first()
        )
    if session is None:
        raise NotActive(
            f"no open session of this account can serve {path}: start a session, then retry",
            field="model",
        )
    authorize("sessions:CreateSamplingSession", sampler_arn(tenant, "*"))
    return sampling.sampler_create(
        tenant=tenant,
        session_id=session.id,
        seq=None,
        base_model=None,
        model_path=ckpt.tinker_path,
        model_id=None,
    )


# -- tokenizers ---------------------------------------------------------------------------------
_tokenizers: dict[str, tuple[object, PreTrainedTokenizerBase]] = {}
_tokenizers_lock = threading.Lock()


def tokenizer_for(base_model: str) -> PreTrainedTokenizerBase:
    """The base model's tokenizer, built once from the files its worker registered (and again
    when a worker registers it anew)."""
    stamp = BaseModel.objects.filter(name=base_model).values_list("updated_at", flat=True).first()
    if stamp is None:
        base_model_require(base_model, field="model")
    cached = _tokenizers.get(base_model)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    base = BaseModel.objects.get(name=base_model)
    tokenizer = rendering.tokenizer_load(base.tokenizer_files, base.chat_template)
    with _tokenizers_lock:
        _tokenizers[base_model] = (base.updated_at, tokenizer)
    return tokenizer


def context_length(base_model: str) -> int:
    return BaseModel.objects.filter(name=base_model).values_list("context_length", flat=True)[0]
