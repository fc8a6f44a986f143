"""Session lifecycle: create, heartbeat, and what ends one once its models are gone (stopping
and idle expiry, which unload the models, are ``controlplane.operations.session_end``)."""

from __future__ import annotations

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from pydantic import ValidationError

from controlplane.errors import DomainError, QuotaExceeded
from controlplane.kms import services as kms
from controlplane.metrics import QUOTA_REFUSALS
from controlplane.quotas.limits import limits_for
from controlplane.tenants.models import Tenant
from controlplane.tenants.services import storage_location_owned, subnets_not_owned
from loopwright.types import VpcConfig

from ..errors import Gone
from ..models import Session, TrainingModel
from ..save_groups import session_group_checked
from ..selectors import session_get
from .storage import s3_output_path_checked

PLATFORM_FIELDS = (
    "role_arn",
    "model_package_group_arn",
    "s3_output_path",
    "kms_key_arn",
    "vpc_config",
    "context_length",  # of its models and samplers that ask for none (services/context.py)
)


@transaction.atomic
def session_create(
    *,
    tenant: Tenant,
    name: str = "",
    tags=(),
    user_metadata=None,
    sdk_version: str = "",
    platform=None,
) -> Session:
    platform = {k: v for k, v in (platform or {}).items() if k in PLATFORM_FIELDS and v is not None}
    if "kms_key_arn" in platform:  # stored as the key's ARN, whichever way it was named
        platform["kms_key_arn"] = kms.session_key(tenant=tenant, ref=platform["kms_key_arn"]).arn
    if "s3_output_path" in platform:  # where its checkpoints go (else the local storage)
        platform["s3_output_path"] = s3_output_path_checked(platform["s3_output_path"])
        if not storage_location_owned(tenant=tenant, uri=platform["s3_output_path"]):
            raise DomainError(
                f"s3_output_path: {platform['s3_output_path']} is not inside a storage location "
                "of this account (operators add them with manage.py storage_locations)",
                field="s3_output_path",
            )
    if "vpc_config" in platform:
        platform["vpc_config"] = vpc_config_checked(platform["vpc_config"])
        _require_own_subnets(tenant, platform["vpc_config"]["subnets"])
    if "model_package_group_arn" in platform:  # the group saves register into (made on first use)
        platform["model_package_group_arn"] = session_group_checked(
            tenant=tenant, arn=platform["model_package_group_arn"]
        )
    session_slot_claim(tenant=tenant)  # locks the tenant until this transaction commits
    return Session.objects.create(
        tenant=tenant,
        name=name or "",
        tags=list(tags or []),
        user_metadata=user_metadata,
        sdk_version=sdk_version or "",
        platform=platform,
        last_heartbeat_at=timezone.now(),
    )


def session_slot_claim(*, tenant: Tenant) -> None:
    """Refuse a new session while the tenant's live (pending or active) sessions fill its quota.

    Call inside the transaction that creates the session: the tenant's row stays locked until it
    commits, so parallel creations are counted one after another and never overshoot.
    """
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("session_slot_claim must run inside the creating transaction")
    Tenant.objects.select_for_update().only("pk").get(pk=tenant.pk)
    limit = limits_for(tenant).concurrent_sessions
    live = Session.objects.filter(tenant_id=tenant.pk, state__in=Session.LIVE_STATES).count()
    if live >= limit:
        QUOTA_REFUSALS.labels("concurrent_sessions").inc()
        raise QuotaExceeded(
            f"account {tenant.account_id} has {live} live sessions (pending or active), its limit "
            f"of {limit} concurrent sessions; stop() a session (POST /api/v1/sessions/<id>/stop) "
            "or wait until an idle one expires "
            f"({settings.SESSION_IDLE_TIMEOUT_SECONDS} seconds without a heartbeat)"
        )


def _require_own_subnets(tenant: Tenant, subnets: list[str]) -> None:
    """A session may only name its own tenant's subnets (another's looks unregistered)."""
    foreign = subnets_not_owned(tenant=tenant, subnet_ids=subnets)
    if foreign:
        i = foreign[0]
        raise DomainError(
            f"vpc_config.subnets[{i}]: {subnets[i]} is not registered to this account "
            "(operators register a tenant's subnets with manage.py vpc_subnets)",
            field=f"vpc_config.subnets[{i}]",
        )


def vpc_config_checked(value) -> dict:
    """The session's network as stored, checked as the wire type checks it (400 naming the
    field, e.g. ``vpc_config.subnets[2]``)."""
    try:
        return VpcConfig.model_validate(value).model_dump(mode="json")
    except ValidationError as exc:
        first = exc.errors()[0]
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"])
        message = "unknown field" if first["type"] == "extra_forbidden" else first["msg"]
        raise DomainError(f"vpc_config{path}: {message}", field=f"vpc_config{path}") from None


def session_heartbeat(*, tenant: Tenant, session_id: str) -> Session:
    session = session_get(tenant=tenant, session_id=session_id)
    if session.state in Session.ENDED_STATES:
        raise Gone(f"session {session_id} is {session.state}", field="session_id")
    Session.objects.filter(pk=session.pk).update(last_heartbeat_at=timezone.now())
    return session


def session_touch(session: Session) -> None:
    """Any request counts as a sign of life."""
    Session.objects.filter(pk=session.pk).update(last_heartbeat_at=timezone.now())


def session_finish_if_unloaded(session_id: str) -> None:
    """Called when a model unloads: a stopping session with no live model is stopped."""
    session = Session.objects.select_for_update().get(pk=session_id)
    if (
        session.state == Session.State.STOPPING
        and not session.models.filter(state__in=TrainingModel.LIVE_STATES).exists()
    ):
        session.state = Session.State.STOPPED
        session.save(update_fields=["state"])


def session_fail_if_unstarted(session_id: str) -> bool:
    """Called when a model could not be created: a session that never started and now has no
    live model has failed (it ends, and stops counting against the quota). The failed
    create_model operation keeps the reason. Whether it failed."""
    if TrainingModel.objects.filter(
        session_id=session_id, state__in=TrainingModel.LIVE_STATES
    ).exists():
        return False
    return bool(
        Session.objects.filter(pk=session_id, state=Session.State.PENDING).update(
            state=Session.State.FAILED, ended_at=timezone.now()
        )
    )
