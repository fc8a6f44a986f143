"""``page`` wraps every dashboard view: login required, the caller's principal set (the same IAM
principal the API uses, see ``controlplane.edge.callers``), and a refused or failed request
answered as a page."""

from __future__ import annotations

import functools
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from controlplane.audit.outcomes import note_failure
from controlplane.edge.callers import login_principal
from controlplane.edge.errors import refusal
from controlplane.errors import DomainError


def page(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """A dashboard page: login required; ``request.principal`` and ``request.tenant`` set; a
    DomainError renders as a page with its status (another tenant's thing is a plain 404)."""

    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        principal = login_principal(request)
        if principal is None:
            return redirect(f"/login?next={request.get_full_path()}")
        request.principal = principal
        request.tenant = principal.tenant
        try:
            return view(request, *args, **kwargs)
        except DomainError as e:
            note_failure(e.detail)
            return render(
                request,
                "web/errors/problem.html",
                {"status": e.status, "detail": e.detail, "code": e.code} | refusal(request, e),
                status=e.status,
            )

    return wrapped
