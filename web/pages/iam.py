"""IAM: roles (trust policy, inline policies), members and their inline policies, a policy editor
that validates with the API's parser, API keys and a policy simulator. Each page authorizes the
IAM action of the API route it mirrors."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from controlplane.edge.callers import allow
from controlplane.errors import NotFound
from controlplane.iam import selectors, services
from controlplane.iam.builtin import DOCUMENTS
from controlplane.iam.resources import role_arn, user_arn
from controlplane.tenants import selectors as tenants

from ..formkit import Form, code_area, submit
from ..iam_access_keys import access_key_list, access_key_revoke
from ..iam_keys import key_list, key_revoke
from ..iam_members import RoleForm as MembershipForm
from ..iam_members import (
    invitation_detail,
    invitation_revoke,
    member_invite,
    member_list,
    member_remove,
    member_role,
    member_url,
)
from ..iam_policy_editor import (
    TrustForm,
    editor,
    editor_action,
    policy_page,
    pretty,
)
from ..iam_simulator import simulator
from ..login_required import page


class RoleForm(Form):
    name = forms.CharField(max_length=200, help_text="1–64 letters, digits or +=,.@_-")
    description = forms.CharField(required=False, max_length=2000)
    trust_policy = forms.CharField(
        label="Trust policy",
        widget=code_area(12),
        help_text="Who may assume the role. The default lets training sessions run as it.",
        initial=pretty(services.DEFAULT_TRUST_POLICY),
        strip=False,
    )


# -- roles -------------------------------------------------------------------------------------
@page
@require_http_methods(["GET", "POST"])
def role_list(request: HttpRequest) -> HttpResponse:
    form = RoleForm(request.POST if request.method == "POST" else None)
    if request.method == "POST":

        def create(data: dict):
            allow(request, "iam:CreateRole", role_arn(request.tenant, data["name"]))
            return services.role_create(
                tenant=request.tenant,
                actor=request.principal.arn,
                name=data["name"],
                description=data["description"],
                trust_policy=data["trust_policy"],
            )

        role = submit(form, create)
        if role is not None:
            messages.success(request, f"Role {role.name} created. Add its permissions below.")
            return redirect(f"/iam/roles/{role.name}")
    allow(request, "iam:ListRoles")
    roles = selectors.roles(tenant=request.tenant).prefetch_related("policies")
    return render(
        request,
        "web/iam/roles.html",
        {"roles": roles, "form": form, "role_wildcard": role_arn(request.tenant, "*")},
        status=400 if form.is_bound else 200,
    )


@page
@require_GET
def role_detail(request: HttpRequest, name: str) -> HttpResponse:
    allow(request, "iam:GetRole", role_arn(request.tenant, name))
    role = selectors.role_get(tenant=request.tenant, name=name)
    policies = [(p.name, pretty(p.document)) for p in role.policies.order_by("name")]
    return render(
        request,
        "web/iam/role.html",
        {"role": role, "trust": pretty(role.trust_policy), "policies": policies},
    )


@page
@require_POST
def role_delete(request: HttpRequest, name: str) -> HttpResponse:
    allow(request, "iam:DeleteRole", role_arn(request.tenant, name))
    services.role_delete(role=selectors.role_get(tenant=request.tenant, name=name))
    messages.success(request, f"Role {name} deleted, with its API keys.")
    return redirect("/iam/roles")


@page
@require_http_methods(["GET", "POST"])
def role_trust(request: HttpRequest, name: str) -> HttpResponse:
    arn = role_arn(request.tenant, name)
    if request.method == "POST":
        allow(request, "iam:UpdateAssumeRolePolicy", arn)
        role = selectors.role_get(tenant=request.tenant, name=name)
        form = TrustForm(request.POST)
        if submit(
            form, lambda d: services.role_update_trust(role=role, trust_policy=d["trust_policy"])
        ):
            messages.success(request, f"Trust policy of {name} saved.")
            return redirect(f"/iam/roles/{name}")
    else:
        allow(request, "iam:GetRole", arn)
        role = selectors.role_get(tenant=request.tenant, name=name)
        document = role.trust_policy
        if request.GET.get("template") == "sessions":
            document = services.DEFAULT_TRUST_POLICY
        elif request.GET.get("template") == "members":
            document = services.trust_for_members(request.tenant.account_id)
            messages.info(
                request,
                "The trust policy below lets training sessions run as the role and every member "
                "of this account assume it (to make API keys that act as it). Nothing is saved "
                "until you press Save.",
            )
        form = TrustForm(initial={"trust_policy": pretty(document)})
    return editor(
        request,
        form,
        owner_kind="role",
        owner=role.name,
        owner_arn=arn,
        back=f"/iam/roles/{name}",
        title=f"Trust policy of {name}",
        action=f"/iam/roles/{name}/trust-policy",
        trust=True,
        templates=[
            ("sessions", "Training sessions only (the default)"),
            ("members", "Training sessions and this account's members"),
        ],
    )


@page
@require_http_methods(["GET", "POST"])
def role_policy(request: HttpRequest, name: str, policy_name: str | None = None) -> HttpResponse:
    """Add (``policy_name`` None) or edit one inline policy of a role."""
    arn = role_arn(request.tenant, name)
    allow(request, editor_action(request, "Role", policy_name), arn)
    role = selectors.role_get(tenant=request.tenant, name=name)
    existing = None
    if policy_name is not None:
        existing = role.policies.filter(name=policy_name).first()
        if existing is None:
            raise NotFound(f"policy_name: no policy {policy_name!r} on {name}", field="policy_name")

    def put(data: dict):
        return services.role_policy_put(
            role=role, name=data["policy_name"], document=data["document"]
        )

    return policy_page(
        request,
        existing,
        put,
        owner_kind="role",
        owner=name,
        owner_arn=arn,
        back=f"/iam/roles/{name}",
        base=f"/iam/roles/{name}/policies",
    )


@page
@require_POST
def role_policy_delete(request: HttpRequest, name: str, policy_name: str) -> HttpResponse:
    allow(request, "iam:DeleteRolePolicy", role_arn(request.tenant, name))
    role = selectors.role_get(tenant=request.tenant, name=name)
    services.role_policy_delete(role=role, name=policy_name)
    messages.success(request, f"Policy {policy_name} removed from {name}.")
    return redirect(f"/iam/roles/{name}")


# -- users -------------------------------------------------------------------------------------
@page
@require_GET
def user_detail(request: HttpRequest, username: str) -> HttpResponse:
    arn = user_arn(request.tenant, username.lower())
    allow(request, "iam:GetUser", arn)
    membership = tenants.membership_get(tenant=request.tenant, username=username)
    policies = [(p.name, pretty(p.document)) for p in membership.policies.order_by("name")]
    return render(
        request,
        "web/iam/user.html",
        {
            "member": membership,
            "arn": arn,
            "builtin": pretty(DOCUMENTS[membership.role]),
            "policies": policies,
            "role_form": MembershipForm(initial={"role": membership.role}),
        },
    )


@page
@require_http_methods(["GET", "POST"])
def user_policy(
    request: HttpRequest, username: str, policy_name: str | None = None
) -> HttpResponse:
    """Add (``policy_name`` None) or edit one inline policy of a member."""
    arn = user_arn(request.tenant, username.lower())
    allow(request, editor_action(request, "User", policy_name), arn)
    membership = tenants.membership_get(tenant=request.tenant, username=username)
    existing = None
    if policy_name is not None:
        existing = membership.policies.filter(name=policy_name).first()
        if existing is None:
            raise NotFound(f"policy_name: no policy {policy_name!r}", field="policy_name")
    name = membership.user.get_username()

    def put(data: dict):
        return services.user_policy_put(
            membership=membership, name=data["policy_name"], document=data["document"]
        )

    return policy_page(
        request,
        existing,
        put,
        owner_kind="user",
        owner=name,
        owner_arn=arn,
        back=member_url(name),
        base=f"{member_url(name)}/policies",
    )


@page
@require_POST
def user_policy_delete(request: HttpRequest, username: str, policy_name: str) -> HttpResponse:
    allow(request, "iam:DeleteUserPolicy", user_arn(request.tenant, username.lower()))
    membership = tenants.membership_get(tenant=request.tenant, username=username)
    services.user_policy_delete(membership=membership, name=policy_name)
    messages.success(request, f"Policy {policy_name} removed from {username}.")
    return redirect(member_url(membership.user.get_username()))


def iam_home(request: HttpRequest) -> HttpResponse:
    return redirect("/iam/roles")


urlpatterns = [
    path("iam", iam_home, name="iam"),
    path("iam/roles", role_list, name="iam_roles"),
    path("iam/roles/<str:name>", role_detail, name="iam_role"),
    path("iam/roles/<str:name>/delete", role_delete, name="iam_role_delete"),
    path("iam/roles/<str:name>/trust-policy", role_trust, name="iam_role_trust"),
    path("iam/roles/<str:name>/policies/new", role_policy, name="iam_role_policy_new"),
    path("iam/roles/<str:name>/policies/<str:policy_name>", role_policy, name="iam_role_policy"),
    path(
        "iam/roles/<str:name>/policies/<str:policy_name>/delete",
        role_policy_delete,
        name="iam_role_policy_delete",
    ),
    path("iam/users", member_list, name="iam_users"),
    path("iam/users/invite", member_invite, name="iam_user_invite"),
    path("iam/users/invitations/<int:invitation_id>", invitation_detail, name="iam_invitation"),
    path(
        "iam/users/invitations/<int:invitation_id>/revoke",
        invitation_revoke,
        name="iam_invitation_revoke",
    ),
    path("iam/users/<str:username>/membership", member_role, name="iam_user_membership"),
    path("iam/users/<str:username>/remove", member_remove, name="iam_user_remove"),
    path("iam/users/<str:username>", user_detail, name="iam_user"),
    path("iam/users/<str:username>/policies/new", user_policy, name="iam_user_policy_new"),
    path(
        "iam/users/<str:username>/policies/<str:policy_name>", user_policy, name="iam_user_policy"
    ),
    path(
        "iam/users/<str:username>/policies/<str:policy_name>/delete",
        user_policy_delete,
        name="iam_user_policy_delete",
    ),
    path("iam/keys", key_list, name="iam_keys"),
    path("iam/keys/<str:prefix>/revoke", key_revoke, name="iam_key_revoke"),
    path("iam/access-keys", access_key_list, name="iam_access_keys"),
    path(
        "iam/access-keys/<str:access_key_id>/revoke",
        access_key_revoke,
        name="iam_access_key_revoke",
    ),
    path("iam/simulator", simulator, name="iam_simulator"),
]
