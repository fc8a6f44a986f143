"""Writes for tenants, their members and invitations, subnets and storage locations. Every write
names its actor."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.utils import timezone

from controlplane.errors import Conflict, DomainError, NotFound
from controlplane.install_secrets import LEGACY_SECRET_KEY

from .grants import check_change, check_grant
from .models import Invitation, Membership, StorageLocation, Subnet, Tenant
from .signals import membership_removed, own_login_event


def key_digest(raw: str, secret: str | None = None) -> str:
    """The HMAC under which a secret shown once (an invitation's token, an API key) is stored."""
    key = settings.SECRET_KEY if secret is None else secret
    return hmac.new(key.encode(), raw.encode(), hashlib.sha256).hexdigest()


def key_digests(raw: str) -> list[str]:
    """Every digest ``raw`` may be stored under, the current secret's first: then those of the
    secrets being rotated out, and of the default the embedded install once used. Accepting an
    old secret's digest here is safe where trusting its signatures is not: the digest of a
    random 256-bit token proves only that the caller holds the token."""
    earlier = [*settings.SECRET_KEY_FALLBACKS, LEGACY_SECRET_KEY]
    return [key_digest(raw), *(key_digest(raw, s) for s in earlier if s != settings.SECRET_KEY)]


def _clean_email(email: str, field: str = "email") -> str:
    email = (email or "").strip().lower()
    try:
        validate_email(email)
    except ValidationError:
        raise DomainError(f"{field}: not a valid email address", field=field) from None
    return email


def _check_password(password: str, user=None) -> None:
    try:
        validate_password(password, user)
    except ValidationError as exc:
        raise DomainError("password: " + " ".join(exc.messages), field="password") from None


def clean_name(name: str, field: str, limit: int = 200) -> str:
    """A name without its surrounding blanks: required, at most ``limit`` characters."""
    name = (name or "").strip()
    if not name:
        raise DomainError(f"{field} is required", field=field)
    if len(name) > limit:
        raise DomainError(f"{field}: at most {limit} characters", field=field)
    return name


@transaction.atomic
def password_change(*, user, old_password: str, new_password: str, source_ip=None) -> None:
    """A person changes their own password: the old one must match, the new one pass the
    password rules; recorded in the audit log of every account they belong to."""
    if not user.check_password(old_password or ""):
        raise DomainError("old_password: this is not your current password", field="old_password")
    _check_password(new_password, user)
    user.set_password(new_password)
    user.save(update_fields=["password"])
    own_login_event.send(
        sender=password_change,
        user=user,
        action="auth:ChangePassword",
        reason="changed their own password",
        source_ip=source_ip,
    )


def tenant_create(*, name: str) -> Tenant:
    return Tenant.objects.create(name=clean_name(name, "tenant_name"))


def user_create(*, email: str, password: str | None):
    """A login for ``email``; None as password makes one that cannot log in (scripts only)."""
    User = get_user_model()
    email = _clean_email(email)
    _email_free(email)
    user = User(username=email, email=email)
    if password is None:
        user.set_unusable_password()
    else:
        _check_password(password, user)
        user.set_password(password)
    user.save()
    return user


def signup_problems(*, email: str, password: str | None, tenant_name: str) -> list[DomainError]:
    """Everything wrong with a sign-up, one error per field (the form shows them all at once;
    ``signup`` refuses with the first)."""
    problems: list[DomainError] = []
    for check in (
        lambda: clean_name(tenant_name, "tenant_name"),
        lambda: _email_free(_clean_email(email)),
        lambda: password is None or _check_password(password, _new_user(email)),
    ):
        try:
            check()
        except DomainError as exc:
            problems.append(exc)
    return problems


def _email_free(email: str) -> None:
    if get_user_model().objects.filter(username=email).exists():
        raise Conflict(f"email: {email} already has an account", field="email")


def _new_user(email: str):
    """An unsaved user, for the password rules that compare the password with the email."""
    email = (email or "").strip().lower()
    return get_user_model()(username=email, email=email)


@transaction.atomic
def signup(*, email: str, password: str | None, tenant_name: str) -> Membership:
    """A new tenant and its owner."""
    problems = signup_problems(email=email, password=password, tenant_name=tenant_name)
    if problems:
        raise problems[0]
    tenant = tenant_create(name=tenant_name)
    user = user_create(email=email, password=password)
    return Membership.objects.create(tenant=tenant, user=user, role=Membership.Role.OWNER)


def membership_add(*, tenant: Tenant, user, role: str) -> Membership:
    """A membership as granted already (a sign-up, an invitation being accepted)."""
    _check_role(role)
    try:
        with transaction.atomic():
            return Membership.objects.create(tenant=tenant, user=user, role=role)
    except IntegrityError:
        raise Conflict(f"{user.get_username()} is already a member", field="email") from None


def _acting(acting_membership: Membership | None) -> Membership | None:
    """The caller's membership as it is now, locked until the change commits (a concurrent
    change of the caller's own role waits); None stays None (an IAM role of the account)."""
    if acting_membership is None:
        return None
    return Membership.objects.select_for_update().get(pk=acting_membership.pk)


def _check_role(role: str) -> None:
    if role not in Membership.Role.values:
        raise DomainError(f"role: one of {', '.join(Membership.Role.values)}", field="role")


@transaction.atomic
def membership_set_role(
    *, membership: Membership, role: str, acting_membership: Membership | None
) -> Membership:
    """Change a membership's role, as ``acting_membership`` (None: an IAM role) may
    (``grants``); the last owner stays one."""
    _check_role(role)
    check_change(actor=_acting(acting_membership), membership=membership, role=role)
    if membership.role == Membership.Role.OWNER and role != Membership.Role.OWNER:
        _keep_an_owner(membership)
    membership.role = role
    membership.save(update_fields=["role"])
    return membership


@transaction.atomic
def membership_remove(*, membership: Membership, acting_membership: Membership | None) -> None:
    """Remove a member, as ``acting_membership`` may (``grants``); never the last owner."""
    check_change(actor=_acting(acting_membership), membership=membership, role=None)
    if membership.role == Membership.Role.OWNER:
        _keep_an_owner(membership)
    membership_removed.send(sender=membership_remove, membership=membership)
    membership.delete()


def _keep_an_owner(membership: Membership) -> None:
    owners = Membership.objects.select_for_update().filter(
        tenant=membership.tenant, role=Membership.Role.OWNER
    )
    if len(owners) <= 1:
        raise Conflict("a tenant keeps at least one owner", field="role")


@transaction.atomic
def invitation_create(
    *, tenant: Tenant, email: str, role: str, actor: str, acting_membership: Membership | None
) -> tuple[Invitation, str]:
    """The invitation and its token (shown once), from ``actor`` (an ARN) whose membership is
    ``acting_membership`` (None: an IAM role), which must be allowed to grant ``role``
    (``grants``). Someone who is a member already is refused: the link could never be used
    (their membership is changed instead)."""
    _check_role(role)
    check_grant(actor=_acting(acting_membership), role=role)
    email = _clean_email(email)
    current = Membership.objects.filter(tenant=tenant, user__username=email).first()
    if current is not None:
        raise Conflict(
            f"email: {email} is already a member of this account "
            f"({current.get_role_display().lower()}); change their membership instead",
            field="email",
        )
    token = "inv-" + secrets.token_urlsafe(24)
    invitation = Invitation.objects.create(
        tenant=tenant,
        email=email,
        role=role,
        digest=key_digest(token),
        invited_by=actor,
        expires_at=timezone.now() + timedelta(days=settings.INVITATION_TTL_DAYS),
    )
    return invitation, token


def _inviter_still_grants(invitation: Invitation) -> None:
    """An invitation is worth what its sender may grant when it is used: one whose sender has
    left, or may no longer grant its role, is refused (409: ask for a new one)."""
    kind, _, name = invitation.invited_by.rpartition(":")[2].partition("/")
    inviter = None  # an IAM role of the account
    if kind == "user":
        inviter = Membership.objects.filter(tenant=invitation.tenant, user__username=name).first()
        if inviter is None:
            raise Conflict(
                "token: whoever sent this invitation has left the account; ask for a new one",
                field="token",
            )
    try:
        check_grant(actor=inviter, role=invitation.role)
    except DomainError:
        raise Conflict(
            f"token: whoever sent this invitation may no longer grant {invitation.role}; "
            "ask for a new one",
            field="token",
        ) from None


def invitation_revoke(*, invitation: Invitation) -> None:
    """An invitation not yet accepted stops working (its link is refused like a used one)."""
    if invitation.accepted_at is not None:
        raise Conflict(f"the invitation to {invitation.email} was already accepted", field="id")
    invitation.delete()


@transaction.atomic
def invitation_accept(*, token: str, password: str | None = None, user=None) -> Membership:
    """Join with a new account (``password``) or an existing logged-in ``user``."""
    invitation = (
        Invitation.objects.select_for_update()
        .filter(digest__in=key_digests(token or ""), accepted_at__isnull=True)
        .first()
    )
    if invitation is None or invitation.expires_at <= timezone.now():
        raise NotFound("token: no such invitation, or it has expired or been used", field="token")
    _inviter_still_grants(invitation)
    if user is None:
        user = user_create(email=invitation.email, password=password)
    elif user.email.lower() != invitation.email:
        raise DomainError("token: this invitation is for another email address", field="token")
    membership = membership_add(tenant=invitation.tenant, user=user, role=invitation.role)
    invitation.accepted_at = timezone.now()
    invitation.save(update_fields=["accepted_at"])
    return membership


def subnet_register(*, tenant: Tenant, subnet_id: str, description: str = "") -> Subnet:
    """Record that ``subnet_id`` is ``tenant``'s (operators do this when they connect workers)."""
    from loopwright.types.vpc import SUBNET_ID_PATTERN as SUBNET_ID

    if not SUBNET_ID.fullmatch(subnet_id or ""):
        raise DomainError(f"subnet_id: {subnet_id!r} is not a subnet id", field="subnet_id")
    try:
        with transaction.atomic():
            return Subnet.objects.create(
                tenant=tenant, subnet_id=subnet_id, description=description[:200]
            )
    except IntegrityError:
        raise Conflict(f"{subnet_id} is already registered", field="subnet_id") from None


def subnet_deregister(*, tenant: Tenant, subnet_id: str) -> None:
    if not Subnet.objects.filter(tenant=tenant, subnet_id=subnet_id).delete()[0]:
        raise NotFound(f"subnet_id: {subnet_id} is not registered", field="subnet_id")


def subnets_not_owned(*, tenant: Tenant, subnet_ids: list[str]) -> list[int]:
    """Positions of the subnets in ``subnet_ids`` that are not ``tenant``'s."""
    owned = set(
        Subnet.objects.filter(tenant=tenant, subnet_id__in=subnet_ids).values_list(
            "subnet_id", flat=True
        )
    )
    return [i for i, s in enumerate(subnet_ids) if s not in owned]


def storage_location_register(
    *, tenant: Tenant, uri: str, description: str = ""
) -> StorageLocation:
    """Let ``tenant``'s sessions keep checkpoints under ``uri`` (``s3://bucket[/prefix]``)."""
    uri = (uri or "").rstrip("/")
    bucket = uri.removeprefix("s3://").split("/", 1)[0]
    if not uri.startswith("s3://") or not bucket:
        raise DomainError(f"uri: {uri!r} is not an s3://bucket[/prefix] location", field="uri")
    overlapping = StorageLocation.objects.filter(uri__startswith=f"s3://{bucket}").exclude(
        tenant=tenant
    )
    if any(_inside(uri, o.uri) or _inside(o.uri, uri) for o in overlapping):
        raise Conflict(f"{uri} overlaps another account's location", field="uri")
    location, _ = StorageLocation.objects.get_or_create(
        tenant=tenant, uri=uri, defaults={"description": description[:200]}
    )
    return location


def storage_location_deregister(*, tenant: Tenant, uri: str) -> None:
    if not StorageLocation.objects.filter(tenant=tenant, uri=uri.rstrip("/")).delete()[0]:
        raise NotFound(f"uri: {uri} is not registered", field="uri")


def storage_location_owned(*, tenant: Tenant, uri: str) -> bool:
    """Whether ``uri`` lies inside one of ``tenant``'s registered locations."""
    return any(_inside(uri, loc) for loc in tenant.storage_locations.values_list("uri", flat=True))


def _inside(uri: str, location: str) -> bool:
    return uri == location or uri.startswith(location + "/")
