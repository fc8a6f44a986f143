"""Writes for roles, policies and API keys. Documents are validated before anything is saved, so
a bad document changes nothing; every write is recorded in the audit log by the caller's check."""

from __future__ import annotations

import re
import secrets
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from controlplane.errors import Conflict, DomainError, NotFound
from controlplane.tenants.models import Membership, Tenant
from controlplane.tenants.services import clean_name, key_digest

from .errors import PolicyError
from .evaluation import evaluate_trust
from .models import SESSIONS_SERVICE, ApiKey, Role, RolePolicy, UserPolicy
from .policy import PolicyDocument
from .policy_limits import check_policy_limits
from .selectors import KEY_PREFIX, ROLE_NAME

POLICY_NAME = re.compile(r"^[A-Za-z0-9+=,.@_-]{1,128}$")
MAX_INLINE_POLICIES = 10
MAX_KEY_DAYS = 3650

DEFAULT_TRUST_POLICY: dict[str, Any] = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"Service": SESSIONS_SERVICE},
            "Action": "sts:AssumeRole",
        }
    ],
}


def policy_validate(document: Any, *, kind: str, field: str) -> PolicyDocument:
    """Parse ``document`` (an object or a JSON string) or raise a 400 naming the exact place;
    a document past a limit of ``policy_limits`` is refused the same way."""
    try:
        parsed = PolicyDocument.parse(document, kind=kind)  # type: ignore[arg-type]
        check_policy_limits(parsed)
        return parsed
    except PolicyError as exc:
        where = f"{field}.{exc.field}" if exc.field else field
        raise DomainError(f"{where}: {exc.message}", field=where) from None
    except (TypeError, ValueError) as exc:
        raise DomainError(f"{field}: {exc}", field=field) from None


def _name(value: Any, pattern: re.Pattern, field: str, what: str) -> str:
    limit = 64 if pattern is ROLE_NAME else 128
    if not isinstance(value, str) or not pattern.match(value):
        raise DomainError(
            f"{field}: a {what} is 1 to {limit} letters, digits or +=,.@_-", field=field
        )
    return value


@transaction.atomic
def role_create(
    *,
    tenant: Tenant,
    actor: str,
    name: str,
    description: str = "",
    trust_policy: Any = None,
    policies: dict[str, Any] | None = None,
) -> Role:
    name = _name(name, ROLE_NAME, "name", "role name")
    if len(description or "") > 1000:
        raise DomainError("description: at most 1000 characters", field="description")
    trust = policy_validate(
        trust_policy if trust_policy is not None else DEFAULT_TRUST_POLICY,
        kind="trust",
        field="trust_policy",
    )
    checked = _checked_policies(policies or {})
    try:
        with transaction.atomic():
            role = Role.objects.create(
                tenant=tenant,
                name=name,
                description=description or "",
                trust_policy=trust.to_dict(),
                created_by=actor,
            )
    except IntegrityError:
        raise Conflict(f"name: a role named {name!r} exists", field="name") from None
    for policy_name, document in checked.items():
        RolePolicy.objects.create(role=role, name=policy_name, document=document.to_dict())
    return role


def _checked_policies(policies: dict[str, Any]) -> dict[str, PolicyDocument]:
    if not isinstance(policies, dict):
        raise DomainError("policies: an object of policy name → document", field="policies")
    if len(policies) > MAX_INLINE_POLICIES:
        raise DomainError(
            f"policies: at most {MAX_INLINE_POLICIES} inline policies", field="policies"
        )
    return {
        _name(n, POLICY_NAME, f"policies.{n}", "policy name"): policy_validate(
            d, kind="permission", field=f"policies.{n}"
        )
        for n, d in policies.items()
    }


def role_update_trust(*, role: Role, trust_policy: Any) -> Role:
    role.trust_policy = policy_validate(trust_policy, kind="trust", field="trust_policy").to_dict()
    role.save(update_fields=["trust_policy", "updated_at"])
    return role


def role_delete(*, role: Role) -> None:
    role.delete()  # its API keys go with it; sessions already running keep their ARN


def _inline_policy_put(policies, owner: str, name: str, document: Any):
    """Add or replace one inline policy in ``policies`` (a role's or a member's related set)."""
    name = _name(name, POLICY_NAME, "policy_name", "policy name")
    checked = policy_validate(document, kind="permission", field="document")
    with transaction.atomic():
        if not policies.filter(name=name).exists() and policies.count() >= MAX_INLINE_POLICIES:
            raise DomainError(
                f"policy_name: a {owner} has at most {MAX_INLINE_POLICIES} inline policies",
                field="policy_name",
            )
        policy, _ = policies.update_or_create(name=name, defaults={"document": checked.to_dict()})
    return policy


def _inline_policy_delete(policies, name: str) -> None:
    if not policies.filter(name=name).delete()[0]:
        raise NotFound(f"policy_name: no policy {name!r}", field="policy_name")


def role_policy_put(*, role: Role, name: str, document: Any) -> RolePolicy:
    return _inline_policy_put(role.policies, "role", name, document)


def role_policy_delete(*, role: Role, name: str) -> None:
    _inline_policy_delete(role.policies, name)


def user_policy_put(*, membership: Membership, name: str, document: Any) -> UserPolicy:
    return _inline_policy_put(membership.policies, "user", name, document)


def user_policy_delete(*, membership: Membership, name: str) -> None:
    _inline_policy_delete(membership.policies, name)


def role_trusts(role: Role, principal: str) -> bool:
    """Whether the role's trust policy lets ``principal`` (an ARN or a service) assume it."""
    trust = PolicyDocument.parse(role.trust_policy, kind="trust")
    return evaluate_trust(trust, principal).allowed


def trust_for_members(account_id: str) -> dict[str, Any]:
    """A trust policy that lets training sessions run as the role and the account's own
    members (and roles) assume it, e.g. to make an API key that acts as it."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "SessionsRunAsThisRole",
                "Effect": "Allow",
                "Principal": {"Service": SESSIONS_SERVICE},
                "Action": "sts:AssumeRole",
            },
            {
                "Sid": "MembersOfThisAccount",
                "Effect": "Allow",
                "Principal": {"Loopwright": account_id},
                "Action": "sts:AssumeRole",
            },
        ],
    }


def trust_required(role: Role, principal: str, *, field: str = "role_arn") -> None:
    if not role_trusts(role, principal):
        raise DomainError(
            f"{field}: the trust policy of {role.arn} does not let {principal} assume it",
            field=field,
        )


SESSION_ROLE_NAME = "LoopwrightSessionRole"


def session_role_policy(account: str) -> dict[str, Any]:
    """What a tenant's first role may do: train, and protect, publish and manage its checkpoints
    (the model packages sagemaker-train lists, approves and deletes)."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "Train", "Effect": "Allow", "Action": "sessions:*", "Resource": "*"},
            {
                # a key of this role starts sessions that run as the role itself
                "Sid": "PassItself",
                "Effect": "Allow",
                "Action": "iam:PassRole",
                "Resource": f"arn:loopwright:iam::{account}:role/{SESSION_ROLE_NAME}",
            },
            {
                "Sid": "Checkpoints",
                "Effect": "Allow",
                "Action": ["kms:GenerateDataKey", "kms:Decrypt", "kms:DescribeKey"],
                "Resource": f"arn:loopwright:kms::{account}:key/*",
            },
            {
                "Sid": "Publish",
                "Effect": "Allow",
                "Action": [
                    "registry:CreateModelPackage",
                    "registry:DescribeModelPackageGroup",
                    "registry:DescribeModelPackage",
                    # what sagemaker-train does with a session's packages, signing as the role
                    "registry:CreateModelPackageGroup",
                    "registry:ListModelPackages",
                    "registry:UpdateModelPackageApproval",
                    "registry:DeleteModelPackage",
                ],
                "Resource": f"arn:loopwright:registry::{account}:*",
            },
        ],
    }


def tenant_bootstrap(*, tenant: Tenant, actor: str) -> Role:
    """A new tenant's session role, so its first script can start a session at once."""
    return role_create(
        tenant=tenant,
        actor=actor,
        name=SESSION_ROLE_NAME,
        description="Role that training sessions run as (created with the account)",
        policies={"sessions": session_role_policy(tenant.account_id)},
    )


# -- API keys --------------------------------------------------------------------------------
def api_key_create(
    *,
    tenant: Tenant,
    name: str,
    user=None,
    role: Role | None = None,
    expires_in_days: int | None = None,
) -> tuple[ApiKey, str]:
    """Returns the key row and the raw key, which is shown once and never stored."""
    if (user is None) == (role is None):
        raise ValueError("an API key belongs to exactly one user or role")
    name = clean_name(name, "name")
    expires_at = key_expiry(expires_in_days)
    prefix = KEY_PREFIX + secrets.token_hex(6)
    raw = f"{prefix}.{secrets.token_urlsafe(32)}"
    key = ApiKey.objects.create(
        tenant=tenant,
        user=user,
        role=role,
        name=name,
        prefix=prefix,
        digest=key_digest(raw),
        expires_at=expires_at,
    )
    return key, raw


def key_expiry(expires_in_days: int | None):
    """When a key (an API key, an access key pair) made now expires: None for never; a 400
    outside 1 to ``MAX_KEY_DAYS`` days."""
    if expires_in_days is None:
        return None
    if not 1 <= expires_in_days <= MAX_KEY_DAYS:
        raise DomainError(f"expires_in_days: between 1 and {MAX_KEY_DAYS}", field="expires_in_days")
    return timezone.now() + timedelta(days=expires_in_days)


def api_key_revoke(*, key: ApiKey) -> ApiKey:
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
    return key


def api_key_touch(*, key: ApiKey) -> None:
    """Record use, at most once a minute per key (a write per request would be wasteful)."""
    now = timezone.now()
    if key.last_used_at is None or (now - key.last_used_at).total_seconds() > 60:
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
        key.last_used_at = now


def member_keys_revoke(sender=None, *, membership: Membership, **_kwargs) -> None:
    """A member leaving the tenant: their keys there stop working (``membership_removed``)."""
    ApiKey.objects.filter(tenant=membership.tenant, user=membership.user).update(
        revoked_at=timezone.now()
    )
