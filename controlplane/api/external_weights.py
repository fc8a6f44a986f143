"""Time-limited download links to a checkpoint's model package (tinker SDK ≥ 0.30
``get_external_weights_urls``): the caller is authorized when the links are made
(``sessions:GetCheckpointDownloadLinks`` on the checkpoint, ``kms:Decrypt`` on its key), and
each link then downloads the registry's archive of it, without an API key, until it expires.

``tinker://<model>/external_weights/<name>`` (what ``save_weights_external`` answers) is the
sampler checkpoint ``<name>`` saved with its merged model; ``sampler_weights/<name>`` and
``weights/<name>`` work too.
"""

from __future__ import annotations

import os
from datetime import timedelta

from django.core import signing
from django.utils import timezone

from controlplane.errors import DomainError, NotFound
from controlplane.iam.resources import checkpoint_arn
from controlplane.registry import downloads
from controlplane.registry.models import ModelPackage
from controlplane.registry.selectors import package_by_path
from controlplane.tenants.models import Tenant
from controlplane.training_sessions.selectors import checkpoint_by_path

__all__ = ["LINK_SECONDS", "checkpoint_path", "link_open", "links_issue"]

LINK_SECONDS = int(os.environ.get("LOOPWRIGHT_DOWNLOAD_LINK_SECONDS", "3600"))
_SALT = "loopwright.external-weights"
_FOLDERS = {"external_weights": "sampler_weights", "sampler_weights": "sampler_weights"}
_FILES = {"adapter": "adapter.tar.gz", "merged": "merged.tar.gz"}


def checkpoint_path(model_id: str, checkpoint_id: str) -> str:
    """The ``tinker://`` path of checkpoint ``<folder>/<name>`` of model ``model_id``."""
    folder, _, name = checkpoint_id.partition("/")
    if folder not in (*_FOLDERS, "weights") or not name or "/" in name:
        raise NotFound(f"checkpoint {checkpoint_id[:200]!r} not found", field="checkpoint_id")
    return f"tinker://{model_id}/{_FOLDERS.get(folder, folder)}/{name}"


def links_issue(*, tenant: Tenant, path: str, authorize, actor: str, base_url: str) -> dict:
    """``{urls: {file: url}, expires}`` for the checkpoint at ``path``: its adapter archive, and
    its merged model when it has one. ``authorize(action, resource)`` raises if not allowed."""
    ckpt = checkpoint_by_path(tenant=tenant, tinker_path=path, field="checkpoint_id")
    authorize(
        "sessions:GetCheckpointDownloadLinks", checkpoint_arn(tenant, ckpt.model_id, ckpt.name)
    )
    package = package_by_path(tenant=tenant, path=path, field="checkpoint_id")
    expires = timezone.now() + timedelta(seconds=LINK_SECONDS)
    urls = {}
    for fmt, filename in _FILES.items():
        try:
            plan = downloads.download_plan(
                package=package, format=fmt, include_optimizer=False, field="checkpoint_id"
            )
        except DomainError:
            if fmt == "adapter":
                raise
            continue  # no merged model was saved with it
        if plan.key_arn:
            authorize("kms:Decrypt", plan.key_arn)
        token = signing.dumps(
            {"t": str(tenant.pk), "p": package.pk, "f": fmt, "a": actor}, salt=_SALT
        )
        urls[filename] = f"{base_url}/api/v1/registry/signed-downloads/{token}"
    return {"urls": urls, "expires": expires.isoformat()}


def link_open(token: str) -> tuple[ModelPackage, str, str]:
    """The package, format and issuing principal a link names; 404 for a link that is not one
    of ours, 410 for one that expired."""
    try:
        claim = signing.loads(token, salt=_SALT, max_age=LINK_SECONDS)
    except signing.SignatureExpired:
        raise LinkExpired("this download link expired; ask for new ones", field="token") from None
    except signing.BadSignature:
        raise NotFound("no such download link", field="token") from None
    package = ModelPackage.objects.filter(pk=claim["p"], tenant_id=claim["t"]).first()
    if package is None:
        raise NotFound("no such download link", field="token")
    return package, claim["f"], claim["a"]


class LinkExpired(DomainError):
    status = 410
    code = "link_expired"
