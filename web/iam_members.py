"""Members of the account from the dashboard: invite someone (the invitation link is shown once,
by the page the form redirects to), the invitations still pending and their revocation, change a
member's membership role, remove a member. The same services and IAM actions as the API
(``iam:CreateUser``, ``iam:UpdateUser``, ``iam:DeleteUser``; revoking an invitation is
``iam:DeleteUser`` on the invited address)."""

from __future__ import annotations

from urllib.parse import quote

from django import forms
from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from controlplane.audit.outcomes import note_failure
from controlplane.edge.callers import allow, can
from controlplane.errors import DomainError
from controlplane.iam.resources import user_arn
from controlplane.tenants import grants, services
from controlplane.tenants import selectors as tenants
from controlplane.tenants.models import Membership

from . import shown_once
from .formkit import Form, submit
from .login_required import page

ROLE_CHOICES = Membership.Role.choices


class InviteForm(Form):
    id_prefix = "invite"
    email = forms.EmailField(label="Email", max_length=254)
    role = forms.ChoiceField(
        label="Membership",
        choices=ROLE_CHOICES,
        initial=Membership.Role.MEMBER,
        help_text="Owners and admins manage the account; members train, sample and read.",
    )


class RoleForm(Form):
    id_prefix = "membership"
    role = forms.ChoiceField(label="Membership", choices=ROLE_CHOICES)


def member_url(username: str) -> str:
    """A member's page (a username is an email: kept readable in the path)."""
    return "/iam/users/" + quote(username, safe="@")


@page
@require_GET
def member_list(request: HttpRequest) -> HttpResponse:
    return members_page(request, InviteForm())


def members_page(request: HttpRequest, invite: InviteForm, status: int = 200) -> HttpResponse:
    allow(request, "iam:ListUsers")
    tenant = request.tenant
    members = tenants.memberships(tenant=tenant).prefetch_related("policies")
    rows = [(m, user_arn(tenant, m.user.get_username())) for m in members]
    pending = [
        (i, can(request, "iam:DeleteUser", user_arn(tenant, i.email)))
        for i in tenants.invitations_pending(tenant=tenant)
    ]
    grantable = grants.grantable(request.principal.membership)
    invite.fields["role"].choices = [c for c in ROLE_CHOICES if c[0] in grantable]
    context = {
        "rows": rows,
        "invite": invite,
        "invite_days": settings.INVITATION_TTL_DAYS,
        "pending": pending,
        "may_invite": bool(grantable) and can(request, "iam:CreateUser", user_arn(tenant, "*")),
        "may_read_members": can(request, "iam:GetUser", user_arn(tenant, "*")),
        "members_json": [m.user.get_username() for m in members],
    }
    return render(request, "web/iam/users.html", context, status=status)


@page
@require_http_methods(["GET", "POST"])
def member_invite(request: HttpRequest) -> HttpResponse:
    if request.method == "GET":  # the invite form is on the members page
        return redirect("/iam/users#invite")
    form = InviteForm(request.POST)

    def invite(data: dict):
        email = data["email"].strip().lower()
        allow(request, "iam:CreateUser", user_arn(request.tenant, email))
        return services.invitation_create(
            tenant=request.tenant,
            email=email,
            role=data["role"],
            actor=request.principal.arn,
            acting_membership=request.principal.membership,
        )

    try:
        made = submit(form, invite)
    except DomainError as exc:  # who may grant what (403): said under the role field
        if exc.status != 403 or exc.field != "role":
            raise
        note_failure(exc.detail)
        form.add_error("role", exc.detail.removeprefix("role: "))
        return members_page(request, form, status=403)
    if made is None:
        return members_page(request, form, status=400)
    invitation, token = made
    # the token in the fragment: browsers send it to no server, so no log or Referer has it
    link = request.build_absolute_uri("/invitations/accept") + f"#token={token}"
    # post/redirect/get: the link is shown by the invitation's page, once; the token is stored
    # nowhere but as a digest
    shown_once.keep(request, "invitation", str(invitation.pk), {"link": link})
    return redirect(f"/iam/users/invitations/{invitation.pk}")


@never_cache  # it shows the link once
@page
@require_GET
def invitation_detail(request: HttpRequest, invitation_id: int) -> HttpResponse:
    allow(request, "iam:ListUsers")
    invitation = tenants.invitation_get(tenant=request.tenant, invitation_id=invitation_id)
    fresh = shown_once.take(request, "invitation", str(invitation.pk))
    others = (
        tenants.invitations_pending(tenant=request.tenant)
        .filter(email=invitation.email)
        .exclude(pk=invitation.pk)
    )
    return render(
        request,
        "web/iam/invited.html",
        {
            "invitation": invitation,
            "link": fresh["link"] if fresh else None,
            "others": list(others),
            "expired": invitation.expires_at <= timezone.now(),
            "may_revoke": can(
                request, "iam:DeleteUser", user_arn(request.tenant, invitation.email)
            ),
        },
    )


@page
@require_POST
def invitation_revoke(request: HttpRequest, invitation_id: int) -> HttpResponse:
    invitation = tenants.invitation_get(tenant=request.tenant, invitation_id=invitation_id)
    allow(request, "iam:DeleteUser", user_arn(request.tenant, invitation.email))
    services.invitation_revoke(invitation=invitation)
    messages.success(
        request, f"The invitation to {invitation.email} is revoked: its link no longer works."
    )
    return redirect("/iam/users#invitations")


@page
@require_POST
def member_role(request: HttpRequest, username: str) -> HttpResponse:
    allow(request, "iam:UpdateUser", user_arn(request.tenant, username.lower()))
    membership = tenants.membership_get(tenant=request.tenant, username=username)
    form = RoleForm(request.POST)
    acting = request.principal.membership
    try:
        changed = submit(
            form,
            lambda d: services.membership_set_role(
                membership=membership, role=d["role"], acting_membership=acting
            ),
        )
    except DomainError as exc:  # who may grant what (403): said on the member's page
        if exc.status != 403:
            raise
        form.add_error("role", exc.detail.removeprefix("role: "))
        changed = None
    if changed:
        messages.success(request, f"{username} is now {membership.get_role_display().lower()}.")
    else:
        refused = " ".join(str(e) for e in form.errors.get("role", ["refused"]))
        note_failure(refused)
        messages.error(request, refused)
    return redirect(member_url(username))


@page
@require_POST
def member_remove(request: HttpRequest, username: str) -> HttpResponse:
    allow(request, "iam:DeleteUser", user_arn(request.tenant, username.lower()))
    membership = tenants.membership_get(tenant=request.tenant, username=username)
    try:
        services.membership_remove(
            membership=membership, acting_membership=request.principal.membership
        )
    except DomainError as exc:
        if exc.status not in (403, 409):
            raise
        note_failure(exc.detail)
        messages.error(request, exc.detail)
        return redirect(member_url(username))
    messages.success(request, f"{username} left the account; their API keys are revoked.")
    return redirect("/iam/users")
