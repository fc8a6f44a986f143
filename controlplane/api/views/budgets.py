"""Budgets: spend caps in tokens or US dollars per period on the account, a key, a session or
a tag, with alert thresholds and a signed webhook (docs/billing.md, "Budgets")."""

from __future__ import annotations

from django.utils import timezone
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.budgets import selectors, services
from controlplane.budgets.answers import budget_json
from controlplane.edge.callers import allow, principal_of, tenant_of
from controlplane.errors import NotFound
from controlplane.iam.resources import budget_arn

from .. import bodies
from ..parsing import body_of


def _arn(request: Request, name: str) -> str:
    """The ARN of the caller's budget ``name`` (a name no budget can have is not found)."""
    if not services.NAME.fullmatch(name):
        raise NotFound(f"budget {name[:100]!r} not found", field="name")
    return budget_arn(tenant_of(request), name)


@api_view(["GET", "POST"])
def budgets(request: Request) -> Response:
    tenant, now = tenant_of(request), timezone.now()
    if request.method == "GET":
        allow(request, "billing:ListBudgets")
        found = selectors.budget_list(tenant=tenant)
        return Response({"budgets": [budget_json(b, now=now) for b in found]})
    body = body_of(request, bodies.BudgetCreateBody)
    name = services.name_checked(body.get("name"))
    allow(request, "billing:CreateBudget", budget_arn(tenant, name))
    made = services.budget_create(tenant=tenant, actor=principal_of(request).arn, **body)
    shown = budget_json(made.budget, now=now) | {"webhook_secret": made.webhook_secret}
    return Response(shown, status=201)


@api_view(["GET", "PATCH", "DELETE"])
def budget(request: Request, name: str) -> Response:
    tenant, now = tenant_of(request), timezone.now()
    if request.method == "GET":
        allow(request, "billing:DescribeBudget", _arn(request, name))
        return Response(budget_json(selectors.budget_get(tenant=tenant, name=name), now=now))
    if request.method == "DELETE":
        allow(request, "billing:DeleteBudget", _arn(request, name))
        services.budget_delete(tenant=tenant, actor=principal_of(request).arn, name=name)
        return Response(status=204)
    body = body_of(request, bodies.BudgetUpdateBody)
    allow(request, "billing:UpdateBudget", _arn(request, name))
    made = services.budget_update(
        tenant=tenant, actor=principal_of(request).arn, name=name, changes=body
    )
    shown = budget_json(made.budget, now=now)
    if made.webhook_secret is not None:
        shown["webhook_secret"] = made.webhook_secret
    return Response(shown)
