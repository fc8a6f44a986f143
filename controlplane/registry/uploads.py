"""Weights made elsewhere, uploaded into the account (tinker 0.39's
``external_weights_upload_start`` / ``external_weights_upload_finish``).

Start names what the upload becomes (a sampler checkpoint of a new training run in the account's
``checkpoint copies`` session, for the base model and LoRA shape given) and answers a
time-limited link per file of a PEFT adapter (``adapter_model.safetensors``,
``adapter_config.json``); the client PUTs each file to its link without a key. Each file is
checked as it arrives (its size, and that it is an adapter of that rank) and sealed with the
account's KMS key for the checkpoint's own path before it is stored. Finish adds the
checkpoint's metadata, stores the files where the checkpoint lives, records it and registers it
as a model package version: sample from it, or load it into a model, like any sampler
checkpoint. A worker checks every tensor against the base model when it first loads it.
"""

from __future__ import annotations

import json
import os
import secrets
import struct
import tempfile
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.core import signing
from django.db import transaction
from django.utils import timezone

from controlplane.errors import Conflict, DomainError, NotFound, PayloadTooLarge
from controlplane.fleet.selectors import base_model_require
from controlplane.iam.resources import checkpoint_arn
from controlplane.kms import providers
from controlplane.kms import services as kms
from controlplane.kms.envelope import seal_file
from controlplane.kms.selectors import key_ref_by_arn
from controlplane.storage import location, manifest_digest
from controlplane.tenants.models import Tenant
from controlplane.training_sessions.models import Checkpoint, TrainingModel, new_id
from controlplane.training_sessions.save_groups import save_group_name
from controlplane.training_sessions.services.checkpoint_plans import checkpoint_location
from controlplane.training_sessions.services.lora import lora_checked
from controlplane.training_sessions.services.storage import storage_at

from .copies import PROJECT, copies_session
from .models import ExternalUpload, ModelPackage
from .services import package_create

__all__ = [
    "FILES",
    "UploadLinkExpired",
    "upload_finish",
    "upload_of",
    "upload_put",
    "upload_start",
]

FILES = ("adapter_model.safetensors", "adapter_config.json")
LINK_SECONDS = int(os.environ.get("LOOPWRIGHT_UPLOAD_LINK_SECONDS", "3600"))
_SALT = "loopwright.external-weights-upload"
_DTYPES = {"F32", "F16", "BF16"}
_MAX_HEADER = 100 * 2**20
_MAX_CONFIG = 2**20


class UploadLinkExpired(DomainError):
    status = 410
    code = "link_expired"


def upload_start(
    *,
    tenant: Tenant,
    actor: str,
    base_model: str,
    lora: dict,
    destination_project_id: str | None,
    authorize: Callable[[str, str], None],
) -> tuple[ExternalUpload, dict[str, str]]:
    """A new upload and a signed token per file (the caller makes them links);
    ``authorize(action, resource)`` refuses what the caller may not do."""
    if destination_project_id not in (None, PROJECT):
        raise NotFound(
            f"project {str(destination_project_id)[:100]!r} not found (an account is one "
            f"project, {PROJECT!r})",
            field="destination_project_id",
        )
    base_model_require(base_model)
    lora_checked(lora)
    model = TrainingModel(id=new_id("model"), tenant=tenant, session=copies_session(tenant))
    name = f"upload-{secrets.token_hex(6)}"
    tinker_path, uri = checkpoint_location(model, Checkpoint.Kind.SAMPLER, name)
    authorize("sessions:UploadExternalWeights", checkpoint_arn(tenant, model.id, name))
    sealing = kms.save_sealing(tenant=tenant, key_arn=None, resource=tinker_path)
    authorize("kms:GenerateDataKey", sealing["key_arn"])
    upload = ExternalUpload.objects.create(
        id=new_id("upload"),
        tenant=tenant,
        actor=actor,
        base_model=base_model,
        lora={k: v for k, v in lora.items() if v is not None},
        model_id=model.id,
        tinker_path=tinker_path,
        storage_uri=uri,
        sealing=sealing,
        expires_at=timezone.now() + timedelta(seconds=LINK_SECONDS),
    )
    tokens = {
        f: signing.dumps({"u": upload.id, "t": str(tenant.pk), "f": f}, salt=_SALT) for f in FILES
    }
    return upload, tokens


def _opened(token: str) -> tuple[ExternalUpload, str]:
    try:
        claim = signing.loads(token, salt=_SALT, max_age=LINK_SECONDS)
    except signing.SignatureExpired:
        raise UploadLinkExpired(
            "this upload link expired; start the upload again", field="token"
        ) from None
    except signing.BadSignature:
        raise NotFound("no such upload link", field="token") from None
    upload = ExternalUpload.objects.filter(pk=claim["u"], tenant_id=claim["t"]).first()
    if upload is None:
        raise NotFound("no such upload link", field="token")
    if upload.checkpoint_id is not None:
        raise Conflict(f"upload {upload.id} is finished; start another", field="token")
    return upload, claim["f"]


def upload_put(*, token: str, body, length: int | None) -> dict:
    """Take one file of an upload from ``body`` (a stream of ``length`` bytes): checked, sealed
    for the checkpoint's path and stored beside it until the upload finishes."""
    upload, name = _opened(token)
    limit = settings.MAX_REQUEST_BYTES
    if length is not None and length > limit:
        raise PayloadTooLarge(f"{name}: larger than the limit of {limit} bytes", field=name)
    scratch = Path(settings.STORAGE_DIR) / ".uploads"
    scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:
        plain, sealed = Path(tmp) / "plain", Path(tmp) / "sealed"
        size = _receive(body, plain, limit, name)
        alpha = _check(name, plain, size, upload.lora.get("rank", 32))
        sealed.mkdir()
        _seal(upload, plain, sealed / name, name)
        manifest = storage_at(_staging(upload)).put(sealed, prefix=name)
    with transaction.atomic():
        locked = ExternalUpload.objects.select_for_update().get(pk=upload.pk)
        locked.files = {**locked.files, name: {**manifest[name], "plaintext_bytes": size}}
        if alpha is not None:  # the adapter's own scale, from its config
            locked.lora = {**locked.lora, "alpha": alpha}
        locked.save(update_fields=["files", "lora"])
    return {"file": name, "size_bytes": size}


def _staging(upload: ExternalUpload) -> str:
    return f"{upload.storage_uri}.upload"


def _receive(body, path: Path, limit: int, name: str) -> int:
    size = 0
    with path.open("wb") as out:
        while chunk := body.read(1 << 20):
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"{name}: larger than the limit of {limit} bytes", field=name)
            out.write(chunk)
    return size


def _check(name: str, path: Path, size: int, rank: int) -> float | None:
    """A 400 naming the file unless it is what a LoRA adapter of ``rank`` holds; the config's
    ``lora_alpha``, if it gives one."""
    if name == "adapter_config.json":
        return _check_config(path, size, rank)
    with path.open("rb") as f:
        head = f.read(8)
        n = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
        if not 2 <= n <= min(_MAX_HEADER, size - 8):
            raise DomainError(f"{name}: not a safetensors file", field=name)
        try:
            header = json.loads(f.read(n))
        except ValueError:
            raise DomainError(f"{name}: not a safetensors file (its header)", field=name) from None
    tensors = (
        {k: v for k, v in header.items() if k != "__metadata__"} if isinstance(header, dict) else {}
    )
    if not tensors:
        raise DomainError(f"{name}: holds no tensors", field=name)
    end = 0
    for tensor, spec in tensors.items():
        shape, dtype = spec.get("shape"), spec.get("dtype")
        if dtype not in _DTYPES or not isinstance(shape, list) or len(shape) != 2:
            raise DomainError(f"{name}: {tensor[:100]} is not a 2-D float tensor", field=name)
        if tensor.endswith("lora_A.weight"):
            r = shape[0]
        elif tensor.endswith("lora_B.weight"):
            r = shape[1]
        else:
            raise DomainError(f"{name}: {tensor[:100]} is not a LoRA matrix", field=name)
        if r != rank:
            raise DomainError(f"{name}: {tensor[:100]} has rank {r}, not {rank}", field=name)
        end = max(end, int(spec.get("data_offsets", [0, 0])[1]))
    if 8 + n + end != size:
        raise DomainError(f"{name}: its tensors do not fill the file (truncated?)", field=name)
    return None


def _check_config(path: Path, size: int, rank: int) -> float | None:
    name = "adapter_config.json"
    try:
        config = json.loads(path.read_text()) if size <= _MAX_CONFIG else None
    except ValueError:
        config = None
    if not isinstance(config, dict):
        raise DomainError(f"{name}: a JSON object of at most {_MAX_CONFIG} bytes", field=name)
    if config.get("peft_type", "LORA") != "LORA" or config.get("r", rank) != rank:
        raise DomainError(f"{name}: a LoRA adapter of rank {rank} (peft_type, r)", field=name)
    alpha = config.get("lora_alpha")
    if alpha is None:
        return None
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0 < alpha <= 65536:
        raise DomainError(f"{name}: lora_alpha must be a number above 0", field=name)
    return float(alpha)


def _seal(upload: ExternalUpload, plain: Path, out: Path, name: str) -> None:
    sealing = upload.sealing
    key = key_ref_by_arn(tenant_id=upload.tenant_id, arn=sealing["key_arn"])
    context = {**sealing["context"], "file": name}
    seal_file(plain, out, key=key, provider=providers.provider(key), context=context)


def upload_of(*, tenant: Tenant, upload_id: str) -> ExternalUpload:
    """The tenant's upload ``upload_id``; another tenant's is as missing (404)."""
    upload = ExternalUpload.objects.filter(tenant=tenant, pk=upload_id).first()
    if upload is None:
        raise NotFound(f"upload {upload_id[:100]!r} not found", field="upload_id")
    return upload


def upload_finish(*, tenant: Tenant, upload_id: str) -> Checkpoint:
    """The checkpoint the upload makes (the same one again for a retry)."""
    upload = upload_of(tenant=tenant, upload_id=upload_id)
    if upload.checkpoint_id is not None:
        return upload.checkpoint
    missing = [f for f in FILES if f not in upload.files]
    if missing:
        raise DomainError(
            f"upload {upload.id} lacks {', '.join(missing)}: PUT each file to its link first",
            field="upload_id",
        )
    scratch = Path(settings.STORAGE_DIR) / ".uploads"
    scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:
        folder = Path(tmp) / "sealed"
        for name in FILES:
            info = {k: upload.files[name][k] for k in ("size", "sha256")}
            storage_at(_staging(upload)).fetch(name, folder, {name: info})
        meta = Path(tmp) / "loopwright.json"
        meta.write_text(json.dumps(_meta(upload), indent=2))
        _seal(upload, meta, folder / meta.name, meta.name)
        manifest = storage_at(upload.storage_uri).put(folder)
    checkpoint = _record(upload, manifest)
    storage_at(_staging(upload)).delete()
    return checkpoint


def _lora(upload: ExternalUpload) -> dict:
    """The LoRA config the checkpoint records, as a save's (alpha from the adapter's config)."""
    lora = {
        "rank": 32,
        "alpha": 32.0,
        "seed": None,
        "train_attn": True,
        "train_mlp": True,
        "train_unembed": True,
    }
    return {**lora, **upload.lora}


def _meta(upload: ExternalUpload) -> dict:
    return {
        "format_version": 1,
        "kind": "sampler_weights",
        "base_model": upload.base_model,
        "lora": _lora(upload),
        "optimizer_step": None,
    }


def _next_slot(session) -> int:
    top = session.models.order_by("-model_seq_id").values_list("model_seq_id", flat=True).first()
    return 0 if top is None else top + 1


@transaction.atomic
def _record(upload: ExternalUpload, manifest: dict) -> Checkpoint:
    upload = ExternalUpload.objects.select_for_update().get(pk=upload.pk)
    if upload.checkpoint_id is not None:  # finished by a request running alongside
        return upload.checkpoint
    session = copies_session(upload.tenant)
    model = TrainingModel.objects.create(
        id=upload.model_id,
        tenant=upload.tenant,
        session=session,
        model_seq_id=_next_slot(session),
        base_model=upload.base_model,
        lora=_lora(upload),
        state=TrainingModel.State.UNLOADED,
        placement=TrainingModel.Placement.NEVER_PLACED,
        status_reason=f"uploaded weights ({upload.id}): they are sampled or loaded, not trained",
    )
    name = upload.tinker_path.rsplit("/", 1)[1]
    checkpoint = Checkpoint.objects.create(
        tenant=upload.tenant,
        model=model,
        kind=Checkpoint.Kind.SAMPLER,
        name=name,
        tinker_path=upload.tinker_path,
        storage_path=location(upload.storage_uri),
        storage_uri=upload.storage_uri,
        manifest=manifest,
        sha256=manifest_digest(manifest),
        size_bytes=sum(int(upload.files[f]["plaintext_bytes"]) for f in FILES),
        kms_key_arn=upload.sealing["key_arn"],
        lora=model.lora,
        base_model=upload.base_model,
    )
    package_create(
        tenant=upload.tenant,
        actor=upload.actor,
        group_name=save_group_name(session.platform, model.id),
        checkpoint=checkpoint,
        kind=ModelPackage.Kind.SAMPLER_WEIGHTS,
        session_id=session.id,
        model_id=model.id,
        step=None,
        metrics={},
    )
    upload.checkpoint = checkpoint
    upload.save(update_fields=["checkpoint"])
    return checkpoint
