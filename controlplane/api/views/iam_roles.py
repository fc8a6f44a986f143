"""IAM roles: create, read, delete, trust policy, inline permission policies."""

from __future__ import annotations

from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.edge.callers import allow, principal_of, tenant_of
from controlplane.iam import selectors, services
from controlplane.iam.models import Role
from controlplane.iam.resources import role_arn

from .. import bodies
from ..parsing import body_of, text


def role_json(role: Role, *, with_policies: bool = False) -> dict:
    out = {
        "name": role.name,
        "arn": role.arn,
        "description": role.description,
        "trust_policy": role.trust_policy,
        "created_by": role.created_by,
        "created_at": role.created_at.isoformat(),
        "updated_at": role.updated_at.isoformat(),
    }
    if with_policies:
        out["policies"] = {p.name: p.document for p in role.policies.order_by("name")}
    return out


@api_view(["GET", "POST"])
def roles(request: Request) -> Response:
    tenant = tenant_of(request)
    if request.method == "GET":
        allow(request, "iam:ListRoles")
        return Response({"roles": [role_json(r) for r in selectors.roles(tenant=tenant)]})
    body = body_of(request, bodies.RoleCreateBody)
    name = text(body, "name", 64)
    allow(request, "iam:CreateRole", role_arn(tenant, name))
    role = services.role_create(
        tenant=tenant,
        actor=principal_of(request).arn,
        name=name,
        description=text(body, "description", 1000, required=False),
        trust_policy=body.get("trust_policy"),
        policies=body.get("policies"),
    )
    return Response(role_json(role, with_policies=True), status=201)


@api_view(["GET", "DELETE"])
def role(request: Request, name: str) -> Response:
    tenant = tenant_of(request)
    if request.method == "GET":
        allow(request, "iam:GetRole", role_arn(tenant, name))
        return Response(role_json(selectors.role_get(tenant=tenant, name=name), with_policies=True))
    allow(request, "iam:DeleteRole", role_arn(tenant, name))
    services.role_delete(role=selectors.role_get(tenant=tenant, name=name))
    return Response(status=204)


@api_view(["PUT"])
def role_trust_policy(request: Request, name: str) -> Response:
    tenant = tenant_of(request)
    allow(request, "iam:UpdateAssumeRolePolicy", role_arn(tenant, name))
    body = body_of(request, bodies.TrustPolicyBody)
    found = selectors.role_get(tenant=tenant, name=name)
    return Response(
        role_json(services.role_update_trust(role=found, trust_policy=body.get("trust_policy")))
    )


@api_view(["GET"])
def role_policies(request: Request, name: str) -> Response:
    tenant = tenant_of(request)
    allow(request, "iam:ListRolePolicies", role_arn(tenant, name))
    found = selectors.role_get(tenant=tenant, name=name)
    return Response(
        {"policy_names": list(found.policies.order_by("name").values_list("name", flat=True))}
    )


@api_view(["GET", "PUT", "DELETE"])
def role_policy(request: Request, name: str, policy_name: str) -> Response:
    tenant = tenant_of(request)
    arn = role_arn(tenant, name)
    if request.method == "GET":
        allow(request, "iam:GetRolePolicy", arn)
        found = selectors.role_get(tenant=tenant, name=name)
        policy = found.policies.filter(name=policy_name).first()
        if policy is None:
            from controlplane.errors import NotFound

            raise NotFound(f"policy_name: no policy {policy_name!r} on {name}", field="policy_name")
        return Response({"role": name, "policy_name": policy.name, "document": policy.document})
    if request.method == "DELETE":
        allow(request, "iam:DeleteRolePolicy", arn)
        services.role_policy_delete(
            role=selectors.role_get(tenant=tenant, name=name), name=policy_name
        )
        return Response(status=204)
    allow(request, "iam:PutRolePolicy", arn)
    body = body_of(request, bodies.PolicyBody)
    policy = services.role_policy_put(
        role=selectors.role_get(tenant=tenant, name=name),
        name=policy_name,
        document=body.get("document"),
    )
    return Response({"role": name, "policy_name": policy.name, "document": policy.document})
