"""Time-limited download links to a checkpoint's model package (tinker SDK ≥ 0.30
``get_external_weights_urls``). A link carries its signed claim in its query (``?token=``, which
the logs scrub), names the principal and API key that made it, and expires after
``DOWNLOAD_LINK_SECONDS`` (an hour). Each use acts as that principal again: a revoked key, a
member who left, a deleted role or a policy that no longer allows it refuses the link, and the
decision is audited like any call (``sessions:GetCheckpointDownloadLinks``, ``kms:Decrypt``).

``tinker://<model>/external_weights/<name>`` (what ``save_weights_external`` answers) is the
sampler checkpoint ``<name>`` saved with its merged model; ``sampler_weights/<name>`` and
``weights/<name>`` work too.
"""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlencode

from django.conf import settings
from django.core import signing
from django.utils import timezone

from controlplane.errors import DomainError, NotFound
from controlplane.iam.principals import Principal, for_api_key, for_membership
from controlplane.iam.resources import checkpoint_arn
from controlplane.iam.selectors import api_key_live
from controlplane.registry import downloads
from controlplane.registry.models import ModelPackage
from controlplane.registry.selectors import package_by_path
from controlplane.tenants.models import Membership, Tenant
from controlplane.training_sessions.selectors import checkpoint_by_path

__all__ = ["Link", "checkpoint_path", "link_open", "links_issue"]

_SALT = "loopwright.external-weights"
_FOLDERS = {"external_weights": "sampler_weights", "sampler_weights": "sampler_weights"}
_FILES = {"adapter": "adapter.tar.gz", "merged": "merged.tar.gz"}


def checkpoint_path(model_id: str, checkpoint_id: str) -> str:
    """The ``tinker://`` path of checkpoint ``<folder>/<name>`` of model ``model_id``."""
    folder, _, name = checkpoint_id.partition("/")
    if folder not in (*_FOLDERS, "weights") or not name or "/" in name:
        raise NotFound(f"checkpoint {checkpoint_id[:200]!r} not found", field="checkpoint_id")
    return f"tinker://{model_id}/{_FOLDERS.get(folder, folder)}/{name}"


def links_issue(
    *, tenant: Tenant, path: str, authorize, principal: Principal, base_url: str
) -> dict:
    """``{urls: {file: url}, expires}`` for the checkpoint at ``path``: its adapter archive, and
    its merged model when it has one. ``authorize(action, resource)`` raises if not allowed."""
    ckpt = checkpoint_by_path(tenant=tenant, tinker_path=path, field="checkpoint_id")
    resource = checkpoint_arn(tenant, ckpt.model_id, ckpt.name)
    authorize("sessions:GetCheckpointDownloadLinks", resource)
    package = package_by_path(tenant=tenant, path=path, field="checkpoint_id")
    expires = timezone.now() + timedelta(seconds=settings.DOWNLOAD_LINK_SECONDS)
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
        claim = {
            "t": str(tenant.pk),
            "p": package.pk,
            "f": fmt,
            "c": resource,
            **_issuer(principal),
        }
        token = urlencode({"token": signing.dumps(claim, salt=_SALT, compress=True)})
        urls[filename] = f"{base_url}/api/v1/registry/signed-downloads?{token}"
    return {"urls": urls, "expires": expires.isoformat()}


def _issuer(principal: Principal) -> dict:
    """Who made the link: the principal's ARN and the API key it used (``k``), or the login's
    membership (``m``)."""
    issuer = {"a": principal.arn}
    if principal.api_key is not None:
        issuer["k"] = principal.api_key.prefix
    elif principal.membership is not None:
        issuer["m"] = principal.membership.pk
    return issuer


class Link:
    """An opened link: the package and format it downloads, the checkpoint it was made for and
    the principal that made it, as it is now."""

    def __init__(self, package: ModelPackage, format: str, resource: str, principal: Principal):
        self.package, self.format, self.resource, self.principal = (
            package,
            format,
            resource,
            principal,
        )


def link_open(token: str) -> Link:
    """The link ``token`` signs: 404 for one that is not ours, 410 for one that expired, 403
    when the key or login that made it no longer has access."""
    try:
        claim = signing.loads(token, salt=_SALT, max_age=settings.DOWNLOAD_LINK_SECONDS)
    except signing.SignatureExpired:
        raise LinkExpired("this download link expired; ask for new ones", field="token") from None
    except signing.BadSignature:
        raise NotFound("no such download link", field="token") from None
    package = ModelPackage.objects.filter(pk=claim["p"], tenant_id=claim["t"]).first()
    if package is None:
        raise NotFound("no such download link", field="token")
    principal = _issuer_now(claim)
    if principal is None or principal.arn != claim["a"]:
        raise LinkRevoked(
            f"the access of {claim['a']}"
            + (f" (API key {claim['k']})" if claim.get("k") else "")
            + ", which made this link, was revoked",
            field="token",
        )
    return Link(package, claim["f"], claim["c"], principal)


def _issuer_now(claim: dict) -> Principal | None:
    """The principal that made the link, if its key or membership is still live."""
    if claim.get("k"):
        key = api_key_live(prefix=claim["k"], tenant_id=claim["t"])
        return for_api_key(key) if key is not None else None
    membership = (
        Membership.objects.select_related("user", "tenant")
        .filter(pk=claim.get("m"), tenant_id=claim["t"], user__is_active=True)
        .first()
    )
    return for_membership(membership) if membership is not None else None


class LinkExpired(DomainError):
    status = 410
    code = "link_expired"


class LinkRevoked(DomainError):
    status = 403
    code = "link_revoked"
