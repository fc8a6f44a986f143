"""Plans of the operations that write or read checkpoints: where a save goes, which key seals
it and which registry group records it; what a load opens, checked against the session's role."""

from __future__ import annotations

import re
from datetime import timedelta

from django.utils import timezone

from controlplane.errors import DomainError
from controlplane.iam.sessions import session_may
from controlplane.kms import services as kms
from controlplane.storage import join_uri, location
from controlplane.tenants.models import Tenant

from ..errors import Conflict
from ..models import Checkpoint, Session, TrainingModel
from ..save_groups import save_group_arn
from ..selectors import checkpoint_by_path
from .lora import optimizer_of
from .storage import storage_root

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def checkpoint_name(name: str | None, fallback: str | None, prefix: str = "state") -> str:
    """``name``, else ``fallback``, else ``<prefix>-<time>`` (a request without ``seq_id``)."""
    name = name or fallback or timezone.now().strftime(f"{prefix}-%Y%m%dT%H%M%S%f")
    if not NAME_RE.match(name):
        raise DomainError(
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


def load_plan(*, tenant: Tenant, path: str, optimizer: bool, family: str | None = None):
    """The plan of loading ``path`` into a model (with its ``optimizer`` state or not); a
    requested optimizer ``family`` must be the model's, which the checkpoint's optimizer state
    must be of too."""

    def plan(model: TrainingModel) -> dict:
        ckpt = checkpoint_by_path(tenant=tenant, tinker_path=path)
        if optimizer and ckpt.kind != Checkpoint.Kind.TRAINING:
            raise DomainError(
                f"{path} holds sampler weights without optimizer state; load training state "
                "(saved with save_state) to resume with the optimizer",
                field="path",
            )
        _same_optimizer(model, ckpt, path, optimizer, family)
        if ckpt.base_model != model.base_model:
            raise DomainError(
                f"{path} was trained on {ckpt.base_model}, this model is {model.base_model}",
                field="path",
            )
        return {
            "load": {
                "storage_path": ckpt.storage_path,
                "optimizer": optimizer,
                "tinker_path": path,  # echoed as the client named it (a path or a version ARN)
                "sealing": opening(tenant, ckpt, field="path", session=model.session),
                **stored_fields(ckpt),
            }
        }

    return plan


def _same_optimizer(
    model: TrainingModel, ckpt: Checkpoint, path: str, optimizer: bool, family: str | None
) -> None:
    mine = optimizer_of(model.lora)
    if family is not None and family != mine:
        raise DomainError(
            f"optimizer_config: this model's optimizer is {mine}, chosen when it was created; "
            "a load cannot change it",
            field="optimizer_config",
        )
    saved = optimizer_of(ckpt.lora or {})
    if optimizer and saved != mine:
        raise DomainError(
            f"{path} holds {saved} optimizer state and this model's optimizer is {mine}: load "
            "the weights without the optimizer state, or into a model made with " + saved,
            field="path",
        )


def stored_fields(ckpt: Checkpoint | None) -> dict:
    """Where the worker fetches a checkpoint's objects and the manifest it checks them against
    (nothing for one saved before manifests were kept: it reads the local ``storage_path``)."""
    if ckpt is None or ckpt.manifest is None:
        return {}
    return {"storage_uri": ckpt.storage_uri, "manifest": ckpt.manifest}


def opening(
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
