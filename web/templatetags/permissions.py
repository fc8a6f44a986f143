"""``{% can "registry:UpdateModelPackageApproval" version_arn as may_approve %}``: whether the
page's principal would be allowed an action, for showing a button or saying why it is not there
(not audited: nothing is done until the button is pressed, which is audited)."""

from __future__ import annotations

from django import template

from controlplane.edge.callers import can as principal_can

register = template.Library()


@register.simple_tag(takes_context=True)
def can(context, action: str, resource: str = "*") -> bool:
    request = context.get("request")
    if request is None or getattr(request, "principal", None) is None:
        return False
    return principal_can(request, action, resource)
