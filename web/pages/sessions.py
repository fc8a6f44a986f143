"""Training sessions: the list (live), a form that creates a session with its LoRA model exactly as
the API's create_session and create_model do, one session's page (state, LoRA config, operation
timeline, loss and reward curves, checkpoints, usage, an SDK snippet) and its Stop button."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.core.paginator import Paginator
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_http_methods, require_POST

from controlplane.audit.models import AuditEvent
from controlplane.audit.services import audit_save
from controlplane.edge.callers import allow, can, is_fragment
from controlplane.edge.callers import may as _may
from controlplane.errors import AccessDenied, DomainError
from controlplane.fleet.selectors import served_base_models
from controlplane.iam.access import decide, denial, enforce
from controlplane.iam.models import SESSIONS_SERVICE
from controlplane.iam.resources import model_arn, model_package_group_arn, session_arn
from controlplane.iam.selectors import role_by_arn, roles
from controlplane.iam.services import trust_required
from controlplane.iam.sessions import session_role
from controlplane.kms.selectors import key_list, key_resolve
from controlplane.operations import training
from controlplane.operations.session_end import session_stop as session_end
from controlplane.registry.selectors import group_list
from controlplane.tenants.models import StorageLocation, Subnet
from controlplane.training_sessions import selectors
from controlplane.training_sessions.models import Session
from controlplane.training_sessions.services import sessions as services

from .. import session_page as sp
from .. import session_reads as reads
from .. import try_it
from ..formkit import submit
from ..login_required import page
from ..prices import price_book, training_estimate
from ..session_form import SessionForm, add_domain_error

PER_PAGE = 25
LIVE = sp.LIVE


def _render(request: HttpRequest, full: str, fragment: str, context: dict) -> HttpResponse:
    """The whole page, or only its live part when the page's script asks for it."""
    response = render(request, fragment if is_fragment(request) else full, context)
    patch_vary_headers(response, ["X-Fragment"])
    return response


# -- the list ----------------------------------------------------------------------------------
@page
def session_list(request: HttpRequest) -> HttpResponse:
    allow(request, "sessions:ListTrainingSessions")
    tenant = request.tenant
    state = request.GET.get("state", "")
    if state not in Session.State.values:
        state = ""
    total = reads.session_count(tenant=tenant, state=state or None)
    pages = Paginator(range(total), PER_PAGE)
    current = pages.get_page(request.GET.get("page"))
    offset = (current.number - 1) * PER_PAGE
    rows = reads.session_rows(tenant=tenant, limit=PER_PAGE, offset=offset, state=state or None)
    query = request.GET.urlencode()
    return _render(
        request,
        "web/sessions/list.html",
        "web/sessions/_list.html",
        {
            "rows": rows,
            "page": current,
            "state": state,
            "states": Session.State.choices,
            "total": total,
            "refresh_url": f"/sessions?{query}" if query else "/sessions",
            "live": any(r.session.state in LIVE for r in rows),
        },
    )


# -- creating one ------------------------------------------------------------------------------
def _choices(request: HttpRequest, *, audited: bool = True) -> dict:
    """What the form offers, each list only where the principal may read it (``audited``:
    the page's reads are recorded; the form shown again after a submit records none)."""
    tenant = request.tenant
    may = _may if audited else can
    if audited:
        allow(request, "sessions:ListBaseModels")
    elif not can(request, "sessions:ListBaseModels"):
        return {"base_models": [], "roles": [], "kms_keys": [], "groups": [], "subnets": [],
                "locations": []}  # fmt: skip
    out: dict = {"base_models": [m.name for m in served_base_models()]}
    out["roles"] = list(roles(tenant=tenant)) if may(request, "iam:ListRoles") else []
    out["kms_keys"] = key_list(tenant=tenant) if may(request, "kms:ListKeys") else []
    out["groups"] = (
        [
            (model_package_group_arn(tenant, g.name), g.name)
            for g in group_list(tenant=tenant, limit=200, offset=0)[0]
        ]
        if may(request, "registry:ListModelPackageGroups")
        else []
    )
    out["subnets"] = (
        list(Subnet.objects.filter(tenant=tenant).order_by("subnet_id"))
        if may(request, "vpc:ListSubnets")
        else []
    )
    out["locations"] = (
        list(StorageLocation.objects.filter(tenant=tenant).order_by("uri"))
        if may(request, "storage:ListLocations")
        else []
    )
    return out


def _decisions(request: HttpRequest, form: SessionForm):
    """Every decision creating the session takes, made but not yet recorded (creating the
    session, passing its role, using its key, creating its model), the role and what the
    services are given."""
    tenant = request.tenant
    req, lora_config, base_model, replicas = form.wire()
    principal = request.principal
    checks = [
        decide(
            principal, "sessions:CreateTrainingSession", session_arn(tenant, "*"), request=request
        )
    ]
    if not req.role_arn and principal.role is None:
        session_role(principal, None)  # raises its error: the role is required
    role = role_by_arn(tenant=tenant, arn=req.role_arn or principal.role.arn)
    passed = {"iam:PassedToService": SESSIONS_SERVICE}
    checks.append(decide(principal, "iam:PassRole", role.arn, request=request, context=passed))
    if req.kms_key_arn:
        key = key_resolve(tenant=tenant, ref=req.kms_key_arn, field="kms_key_arn")
        checks.append(decide(principal, "kms:DescribeKey", key.arn, request=request))
    lora = lora_config.model_dump(mode="json")
    lora.pop("type", None)
    conditions = training.create_model_conditions(
        base_model=base_model, lora=lora, replicas=replicas
    )
    checks.append(
        decide(principal, "sessions:CreateModel", model_arn(tenant, "*"), request=request,
               context=conditions)
    )  # fmt: skip
    return checks, role, (req, lora, base_model, replicas)


def session_create_from(request: HttpRequest, form: SessionForm) -> Session:
    """What the API's create_session then create_model do, authorized the same way; the
    session and its model are made together or not at all.

    One submit is one entry in the audit log until it succeeds: a refused decision alone (the
    first, which the answer names) when one is refused; else the creation, settled by the
    answer (created, or failed with the service's reason). The decisions it took besides are
    recorded once it is done."""
    tenant = request.tenant
    checks, role, (req, lora, base_model, replicas) = _decisions(request, form)
    refused = next(((d, e) for d, e in checks if not d.allowed), None)
    if refused is not None:
        enforce(*refused)  # records it and raises its 403
    enforce(*checks[0])
    trust_required(role, SESSIONS_SERVICE)
    platform = {k: getattr(req, k) for k in services.PLATFORM_FIELDS} | {"role_arn": role.arn}
    with transaction.atomic():
        session = services.session_create(
            tenant=tenant, name=req.name or "", tags=req.tags, platform=platform
        )
        training.model_create(
            tenant=tenant,
            session_id=session.id,
            model_seq_id=0,
            base_model=base_model,
            lora=lora,
            replicas=replicas,
        )
    for _, event in checks[1:]:
        event.outcome = AuditEvent.Outcome.SUCCEEDED
        audit_save(event)
    return session


def _refuse_unless_can(request: HttpRequest, action: str, resource: str) -> None:
    """The plain refusal page, up front, for a form the caller could not submit. Viewing the
    form is not trying: a refused view is not recorded; a refused submit is, once."""
    decision, event = decide(request.principal, action, resource, request=request)
    if not decision.allowed:
        if request.method == "POST":
            enforce(decision, event)
        raise denial(event.principal, action, resource, decision)


@page
@require_http_methods(["GET", "POST"])
def session_new(request: HttpRequest) -> HttpResponse:
    _refuse_unless_can(request, "sessions:CreateTrainingSession", session_arn(request.tenant, "*"))
    form = SessionForm(request.POST if request.method == "POST" else None)
    status = 200
    if request.method == "POST":
        status = 400
        if form.is_valid():
            try:
                session = session_create_from(request, form)
            except AccessDenied:
                raise  # the plain refusal page
            except DomainError as exc:
                # the service refused the input: the form again with its reason on the field
                # it names (a role or key that is not there is input to fix too)
                add_domain_error(form, exc, SessionForm.FIELDS)
                status = 400 if exc.status == 404 else exc.status
            else:
                messages.success(request, f"Session {session.id} created; its model is starting.")
                return redirect(f"/sessions/{session.id}")
    # what the form offers: read for the page, once a submit is answered (no part of it)
    choices = _choices(request, audited=request.method == "GET")
    form.offer(base_models=choices["base_models"], kms_keys=choices["kms_keys"])
    default_role = next((r for r in choices["roles"] if r.name == "LoopwrightSessionRole"), None)
    if default_role is not None and not form.is_bound:
        form.initial["role_arn"] = default_role.arn
    idle_minutes = settings.SESSION_IDLE_TIMEOUT_SECONDS // 60
    now = timezone.now()
    book = price_book()
    estimates = {
        m: training_estimate(base_model=m, now=now, book=book) for m in choices["base_models"]
    }
    chosen = form["base_model"].value() or next(iter(estimates), None)
    return render(
        request,
        "web/sessions/new.html",
        {
            "form": form,
            "idle_minutes": idle_minutes,
            "estimate": estimates.get(chosen) if chosen else None,
            "estimate_prices": {m: e["prices"] for m, e in estimates.items()},
            **choices,
        },
        status=status,
    )


# -- one session -------------------------------------------------------------------------------
PARTS = {
    "summary": "web/sessions/_live.html",
    "curves": "web/sessions/_curves.html",
    "ops": "web/sessions/_ops.html",
}


@page
def session_detail(request: HttpRequest, session_id: str) -> HttpResponse:
    tenant = request.tenant
    allow(request, "sessions:DescribeTrainingSession", session_arn(tenant, session_id))
    session = selectors.session_get(tenant=tenant, session_id=session_id)
    models = reads.models_of(tenant=tenant, session=session)
    view = sp.View.of(request.GET)
    part = request.GET.get("part", "summary") if is_fragment(request) else None
    context: dict = {"session": session, "live": session.state in sp.LIVE, "view": view}
    if part in (None, "summary"):
        context |= sp.summary(request, session, models)
    if part in (None, "curves"):
        context |= sp.curves(request, session, models, view)
    if part in (None, "ops"):
        context |= sp.operations(request, session, view)
    if part is None:
        query = request.GET.copy()
        query.pop("part", None)
        base = (
            f"/sessions/{session.id}?{query.urlencode()}&" if query else f"/sessions/{session.id}?"
        )
        context |= sp.stop_state(request, session) | {
            "try_form": try_it.TryForm(names=try_it.model_names(session)),
            "platform": session.platform,
            "origin": sp.origin(session),
            "recordings": sp.recordings(session),
            "refresh": {name: f"{base}part={name}" for name in PARTS},
            "snippet": sp.snippet(request, session, models, context.get("checkpoints")),
        }
        response = render(request, "web/sessions/detail.html", context)
    else:
        response = render(request, PARTS.get(part, PARTS["summary"]), context)
    patch_vary_headers(response, ["X-Fragment"])
    return response


@page
@require_POST
def session_stop(request: HttpRequest, session_id: str) -> HttpResponse:
    tenant = request.tenant
    allow(request, "sessions:StopTrainingSession", session_arn(tenant, session_id))
    session = session_end(tenant=tenant, session_id=session_id)
    messages.success(request, f"Session {session.id} is {session.state}.")
    return redirect(f"/sessions/{session.id}")


@page
@require_http_methods(["GET", "POST"])
def session_try(request: HttpRequest, session_id: str) -> HttpResponse:
    """The "Try it" box: a chat message sampled as ``/v1/chat/completions`` samples it."""
    tenant = request.tenant
    allow(request, "sessions:DescribeTrainingSession", session_arn(tenant, session_id))
    session = selectors.session_get(tenant=tenant, session_id=session_id)
    data = request.POST if request.method == "POST" else None
    form = try_it.TryForm(data, names=try_it.model_names(session))
    answer = submit(form, lambda cleaned: try_it.run(request, cleaned)) if data else None
    status = 400 if data and answer is None else 200
    return render(
        request,
        "web/sessions/try.html",
        {"session": session, "try_form": form, "answer": answer},
        status=status,
    )


urlpatterns = [
    path("sessions", session_list, name="sessions"),
    path("sessions/new", session_new, name="sessions_new"),
    path("sessions/<str:session_id>", session_detail, name="session_detail"),
    path("sessions/<str:session_id>/stop", session_stop, name="session_stop"),
    path("sessions/<str:session_id>/try", session_try, name="session_try"),
]
