"""Who may grant which membership role, and change or remove whose membership (the rule of
docs/security.md, "Who may grant a membership"), on top of what IAM allows the caller.

Ranks: owner above admin above member and billing_viewer (equal). Owners grant any role and
change or remove any membership; everyone else grants only roles ranked below their own and
changes or removes only memberships ranked below their own, or steps down or leaves themselves.
An IAM role of the account (a key that acts as one) ranks as an admin. A tenant keeps an owner.
"""

from __future__ import annotations

from controlplane.errors import AccessDenied

from .models import Membership

Role = Membership.Role
RANKS = {Role.OWNER: 3, Role.ADMIN: 2, Role.MEMBER: 1, Role.BILLING_VIEWER: 1}
ROLE_PRINCIPAL_RANK = RANKS[Role.ADMIN]


def rank_of(actor: Membership | None) -> int:
    """The rank the caller acts with: its membership's, or an admin's for an IAM role (None)."""
    return ROLE_PRINCIPAL_RANK if actor is None else RANKS[Role(actor.role)]


def _who(actor: Membership | None) -> str:
    if actor is None:
        return "an IAM role"
    return f"{'an' if actor.role in (Role.OWNER, Role.ADMIN) else 'a'} {actor.role}"


def grantable(actor: Membership | None) -> list[str]:
    """The membership roles ``actor`` may give someone, in the order of ``Membership.Role``."""
    rank = rank_of(actor)
    if rank == RANKS[Role.OWNER]:
        return list(Role.values)
    return [role for role in Role.values if RANKS[Role(role)] < rank]


def check_grant(*, actor: Membership | None, role: str) -> None:
    """Refuse (403, ``field: role``) unless ``actor`` may give someone ``role``."""
    if role not in grantable(actor):
        allowed = ", ".join(grantable(actor)) or "no role"
        raise AccessDenied(
            f"role: {_who(actor)} may grant {allowed}, not {role}",
            field="role",
        )


def check_change(*, actor: Membership | None, membership: Membership, role: str | None) -> None:
    """Refuse (403, ``field: role``) unless ``actor`` may change ``membership`` to ``role``
    (None: remove it). One's own membership may be lowered or left, never raised or moved
    sideways (a member is no billing viewer)."""
    if role == membership.role:
        return
    if actor is not None and actor.pk == membership.pk:
        if role is not None and RANKS[Role(role)] >= RANKS[Role(membership.role)]:
            raise AccessDenied(
                f"role: nobody raises their own membership or moves it sideways "
                f"({membership.role} to {role}); someone ranked above grants it",
                field="role",
            )
        return
    if rank_of(actor) != RANKS[Role.OWNER] and RANKS[Role(membership.role)] >= rank_of(actor):
        what = "remove" if role is None else "change"
        raise AccessDenied(
            f"role: {_who(actor)} may not {what} the membership of {_who(membership)}; "
            "only an owner may",
            field="role",
        )
    if role is not None:
        check_grant(actor=actor, role=role)


def settable(*, actor: Membership | None, membership: Membership) -> list[str]:
    """The roles ``actor`` may give ``membership`` (its own role among them), for forms."""
    allowed = []
    for role in Role.values:
        try:
            check_change(actor=actor, membership=membership, role=role)
        except AccessDenied:
            continue
        allowed.append(role)
    return allowed
