"""What a person does to their own login (signs in, changes their password) goes into the audit
log of every account they belong to, under their user ARN there, since each account's auditors
should see it. The tenants app announces it (``tenants.signals.own_login_event``)."""

from __future__ import annotations

from controlplane.audit.services import audit_record
from controlplane.tenants.models import Membership

from .resources import user_arn


def audit_own_account(
    sender=None, *, user, action: str, reason: str, source_ip: str | None = None, **_kwargs
) -> None:
    """One event in each account ``user`` belongs to."""
    for membership in Membership.objects.select_related("tenant").filter(user=user):
        arn = user_arn(membership.tenant, user.get_username())
        audit_record(
            tenant=membership.tenant,
            principal=arn,
            action=action,
            resource=arn,
            allowed=True,
            effect="Self",
            mutating=action != "auth:Login",
            reason=reason,
            source_ip=source_ip,
        )
