"""The bodies of Loopwright's own resources (accounts, IAM, KMS, registry, session finish): one
pydantic model each, which validates the body (types, sizes, unknown fields) and is what the
OpenAPI document shows. The services check the rest (policy grammar, name rules, ranges that
depend on the account). The Tinker protocol's bodies are the SDK's wire types."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from controlplane.kms.services import MAX_DESCRIPTION as KMS_MAX_DESCRIPTION
from controlplane.registry.services import MAX_DESCRIPTION as REGISTRY_MAX_DESCRIPTION
from loopwright.types.limits import Arn

from .session_reports import MAX_DETAIL


def _text(limit: int, *, required: bool = True) -> Any:
    return Annotated[str, Field(min_length=1 if required else 0, max_length=limit)]


class Body(BaseModel):
    """A request body: unknown fields are refused by name; floats are finite."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True, strict=True)


class SignupBody(Body):
    email: _text(254)
    password: _text(128)
    tenant_name: _text(200)


class LoginBody(Body):
    email: _text(254)
    password: _text(128)


class InvitationAcceptBody(Body):
    token: _text(200)
    password: _text(128)


class RoleCreateBody(Body):
    name: _text(64)
    description: _text(1000, required=False) | None = None
    trust_policy: JsonValue = None
    """An IAM trust policy document (default: the account's users may assume the role)."""
    policies: dict[Annotated[str, Field(min_length=1, max_length=128)], JsonValue] | None = None
    """Inline policies by name: IAM policy documents."""


class TrustPolicyBody(Body):
    trust_policy: JsonValue = None


class PolicyBody(Body):
    document: JsonValue = None
    """An IAM policy document."""


class UserInviteBody(Body):
    email: _text(254)
    role: _text(20)


class MembershipBody(Body):
    role: _text(20)


class ApiKeyCreateBody(Body):
    name: _text(200)
    expires_in_days: Annotated[int, Field(ge=1, le=3650)] | None = None
    role_arn: Arn | None = None


class AccessKeyCreateBody(Body):
    name: _text(200)
    expires_in_days: Annotated[int, Field(ge=1, le=3650)] | None = None
    role_arn: Arn | None = None
    """A role of the account the pair acts as (its trust policy must name the caller)."""


class KeyCreateBody(Body):
    description: _text(KMS_MAX_DESCRIPTION, required=False) | None = None
    alias: _text(256, required=False) | None = None
    """``alias/`` and 1 to 250 of letters, digits, '/', '_' and '-'."""
    provider: Literal["local", "aws"] | None = None
    aws_key_id: _text(2048, required=False) | None = None


class EmptyBody(Body):
    pass


class ScheduleDeletionBody(Body):
    pending_window_days: Annotated[int, Field(ge=7, le=30)] = 30
    """Days before the key is deleted: 7 to 30."""


class RegistryTag(Body):
    key: _text(128)
    value: _text(256, required=False) = ""


class GroupCreateBody(Body):
    name: _text(63)
    description: _text(REGISTRY_MAX_DESCRIPTION, required=False) | None = None
    tags: Annotated[list[RegistryTag], Field(max_length=50)] | None = None


class ApprovalBody(Body):
    approval_status: Literal["Approved", "Rejected", "PendingManualApproval"]
    approval_description: _text(REGISTRY_MAX_DESCRIPTION, required=False) | None = None


class FinishReason(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: _text(64)


class SessionFinishBody(Body):
    reason: FinishReason
    detail: _text(MAX_DETAIL, required=False) | None = None


Amount = int | float | Annotated[str, Field(min_length=1, max_length=40)]
Thresholds = Annotated[list[Annotated[int, Field(ge=1, le=1000)]], Field(max_length=10)]


class BudgetCreateBody(Body):
    name: _text(64)
    """1 to 64 letters, digits, '.', '_' or '-' (the budget's ARN ends in it)."""
    scope: Literal["account", "api_key", "session", "tag"]
    scope_value: _text(256) | None = None
    """The key's prefix or access key id, the session id, or the tag (``label`` or
    ``key=value``); none for the account."""
    unit: Literal["tokens", "usd"]
    period: Literal["day", "week", "month", "total"]
    amount: Amount
    """The limit: whole tokens, or US dollars (at most 6 decimals), 0 to 10^15."""
    thresholds: Thresholds | None = None
    """Percents of the amount that alert once per period (default 50, 80, 100)."""
    hard: bool = True
    """Refuse token-consuming requests once the amount is reached."""
    webhook_url: _text(2048) | None = None
    """Where alerts are POSTed, signed (the secret is in the answer, once)."""
    description: _text(1000, required=False) | None = None


class BudgetUpdateBody(Body):
    amount: Amount | None = None
    period: Literal["day", "week", "month", "total"] | None = None
    thresholds: Thresholds | None = None
    hard: bool | None = None
    webhook_url: _text(2048) | None = None
    """A new URL (with a new secret, in the answer once), or null to remove the webhook."""
    rotate_webhook_secret: bool | None = None
    description: _text(1000, required=False) | None = None


class RetentionRuleBody(Body):
    keep_last: Annotated[int, Field(ge=1, le=100_000)] | None = None
    """Keep the weights of the newest N versions; older ones are deleted (none: keep all)."""
    keep_approved: bool = True
    """Never delete an approved version's weights (false: approved ones count like others)."""


class CheckpointTtlBody(Body):
    ttl_seconds: Annotated[int, Field(ge=3600, le=315_360_000)] | None
    """Seconds from now until the checkpoint expires (1 hour to 10 years); null: never."""
