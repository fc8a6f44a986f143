"""The pages around an account: the landing page, the service status, sign up, log in and out, the
profile (memberships, password) and the switch between the accounts a person belongs to."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import login, logout, update_session_auth_hash
from django.contrib.auth.forms import PasswordChangeForm
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from controlplane.edge.callers import ACCOUNT_KEY, login_principal
from controlplane.errors import DomainError, NotFound, Throttled
from controlplane.fleet.models import Worker
from controlplane.fleet.selectors import served_base_models
from controlplane.fleet.services import live_workers
from controlplane.iam.access import client_ip
from controlplane.iam.provisioning import account_create
from controlplane.iam.resources import role_arn
from controlplane.iam.services import SESSION_ROLE_NAME
from controlplane.tenants import services as tenant_services
from controlplane.tenants.logins import login_check, signup_check

from .. import shown_once
from ..account_forms import AcceptForm, LoginForm, SignupForm, show_error
from ..login_required import page

HOME = "/overview"
_BACKEND = "django.contrib.auth.backends.ModelBackend"


def local_path(candidate: str | None, request: HttpRequest) -> str | None:
    """``candidate`` if it is a path on this site (``/sessions?x=1``), else None: a ``next``
    parameter never sends anyone to another site."""
    if not candidate or not candidate.startswith("/") or candidate.startswith("//"):
        return None
    if "\\" in candidate or not url_has_allowed_host_and_scheme(
        candidate, allowed_hosts={request.get_host()}, require_https=False
    ):
        return None
    return candidate


def landing(request: HttpRequest) -> HttpResponse:
    if login_principal(request) is not None:
        return redirect(HOME)
    return render(request, "web/accounts/landing.html")


def status(request: HttpRequest) -> HttpResponse:
    """What the service can do right now; no tenant's data."""
    request.principal = login_principal(request)  # for the layout's navigation only
    live = list(live_workers().select_related("base_model").order_by("name"))
    return render(
        request,
        "web/status.html",
        {
            "workers": live,
            "base_models": served_base_models(),
            "gone": Worker.objects.exclude(pk__in=[w.pk for w in live]).count(),
            "api_url": request.build_absolute_uri("/api/v1/"),
        },
    )


@never_cache
@require_http_methods(["GET", "POST"])
def signup(request: HttpRequest) -> HttpResponse:
    form = SignupForm(request.POST if request.method == "POST" else None)
    if request.method == "POST":
        try:  # counted before anything is looked up, as the API does
            signup_check(source_ip=client_ip(request))
        except Throttled as exc:
            form.add_error(None, f"{exc.detail}.")
            response = render(request, "web/accounts/signup.html", {"form": form}, status=429)
            response["Retry-After"] = str(exc.retry_after)
            return response
        parsed = form.is_valid()
        data = {name: form.cleaned_data.get(name, "") for name in form.fields}
        fields = {"email": data["email"], "password": data["password"]}
        problems = tenant_services.signup_problems(**fields, tenant_name=data["tenant_name"])
        for problem in problems:  # every field's problem at once, each under its field
            if problem.field not in form.errors:
                show_error(form, problem)
        if parsed and not problems:
            try:
                account = account_create(**fields, tenant_name=data["tenant_name"])
            except DomainError as exc:  # a race with another sign-up for the same email
                show_error(form, exc)
            else:
                login(request, account.membership.user, backend=_BACKEND)
                request.session[ACCOUNT_KEY] = account.membership.tenant.account_id
                # post/redirect/get: the welcome page shows the key once; a reload makes nothing
                shown_once.keep(request, "signup", "welcome", {"api_key": account.api_key})
                return redirect("/welcome")
    status_code = 400 if form.is_bound else 200
    return render(request, "web/accounts/signup.html", {"form": form}, status=status_code)


@never_cache  # it shows the first API key once
@page
def welcome(request: HttpRequest) -> HttpResponse:
    """The page after sign-up: the first API key (once), the session role and how to start."""
    fresh = shown_once.take(request, "signup", "welcome")
    role = role_arn(request.tenant, SESSION_ROLE_NAME)
    return render(
        request,
        "web/accounts/welcome.html",
        {
            "api_key": fresh["api_key"] if fresh else None,
            "role_arn": role,
            "base_url": request.build_absolute_uri("/").rstrip("/"),
        },
    )


@never_cache
@require_http_methods(["GET", "POST"])
def login_view(request: HttpRequest) -> HttpResponse:
    next_path = local_path(request.POST.get("next") or request.GET.get("next"), request)
    form = LoginForm(request.POST if request.method == "POST" else None)
    status_code, retry_after = 200, 0
    if request.method == "POST":
        status_code = 400
        if form.is_valid():
            try:
                user = login_check(
                    email=form.cleaned_data["email"],
                    password=form.cleaned_data["password"],
                    source_ip=client_ip(request),
                )
            except Throttled as exc:
                form.add_error(None, f"{exc.detail} (in {exc.retry_after} seconds).")
                status_code, retry_after = 429, exc.retry_after
            except DomainError as exc:
                show_error(form, exc)
                status_code = exc.status
            else:
                login(request, user, backend=_BACKEND)
                return redirect(next_path or HOME)
    elif login_principal(request) is not None:
        return redirect(next_path or HOME)
    response = render(
        request, "web/accounts/login.html", {"form": form, "next": next_path}, status=status_code
    )
    if retry_after:
        response["Retry-After"] = str(retry_after)
    return response


@never_cache
@require_http_methods(["GET", "POST"])
def invitation_accept(request: HttpRequest) -> HttpResponse:
    """Join an account from an invitation link: as the person signed in, or as a new login. The
    link carries its token in the fragment, which the page's script puts in the form; a link
    of the older form (``?token=``) still works, its token scrubbed from the logs."""
    signed_in = request.user if request.user.is_authenticated else None
    token = request.GET.get("token", "")
    form = AcceptForm(request.POST if request.method == "POST" else None, initial={"token": token})
    if request.method == "POST" and form.is_valid():
        try:
            membership = tenant_services.invitation_accept(
                token=form.cleaned_data["token"],
                password=None if signed_in else form.cleaned_data["password"],
                user=signed_in,
            )
        except DomainError as exc:
            show_error(form, exc)
            if exc.field == "token":  # not a field people can fix: above the form
                form.errors.pop("token", None)
                form.add_error(None, exc.detail.removeprefix("token: "))
            status_code = exc.status
        else:
            if signed_in is None:
                login(request, membership.user, backend=_BACKEND)
            request.session[ACCOUNT_KEY] = membership.tenant.account_id
            messages.success(
                request,
                f"You joined {membership.tenant.name} as {membership.get_role_display().lower()}.",
            )
            return redirect(HOME)
    else:
        status_code = 400 if form.is_bound else 200
    response = render(
        request,
        "web/accounts/accept.html",
        {"form": form, "signed_in": signed_in},
        status=status_code,
    )
    response["Referrer-Policy"] = "no-referrer"  # an old link's ?token= goes nowhere else
    return response


@require_POST
def logout_view(request: HttpRequest) -> HttpResponse:
    logout(request)
    return redirect("/")


@never_cache
@page
@require_http_methods(["GET", "POST"])
def account(request: HttpRequest) -> HttpResponse:
    """The person's own profile: no IAM action applies to it."""
    data = request.POST if request.method == "POST" else None
    form = PasswordChangeForm(request.user, data, label_suffix="")
    form.fields["old_password"].widget.attrs.pop("autofocus", None)  # not the page's purpose
    if request.method == "POST" and form.is_valid():
        tenant_services.password_change(
            user=request.user,
            old_password=form.cleaned_data["old_password"],
            new_password=form.cleaned_data["new_password1"],
            source_ip=client_ip(request),
        )
        update_session_auth_hash(request, form.user)  # stay logged in here, out elsewhere
        messages.success(request, "Your password is changed.")
        return redirect("/account")
    return render(
        request,
        "web/accounts/account.html",
        {"form": form},
        status=400 if form.is_bound else 200,
    )


@page
@require_POST
def account_switch(request: HttpRequest) -> HttpResponse:
    """Act in another account of the person's; one they don't belong to is not found."""
    wanted = request.POST.get("account_id", "")
    chosen = next((m for m in request.memberships if m.tenant.account_id == wanted), None)
    if chosen is None:
        raise NotFound(f"account {wanted!r} not found", field="account_id")
    request.session[ACCOUNT_KEY] = chosen.tenant.account_id
    messages.info(request, f"Now working in {chosen.tenant.name} ({chosen.tenant.account_id}).")
    return redirect(local_path(request.POST.get("next"), request) or HOME)


urlpatterns = [
    path("", landing, name="landing"),
    path("status", status, name="status"),
    path("signup", signup, name="signup"),
    path("welcome", welcome, name="welcome"),
    path("login", login_view, name="login"),
    path("logout", logout_view, name="logout"),
    path("invitations/accept", invitation_accept, name="invitation_accept"),
    path("account", account, name="account"),
    path("account/switch", account_switch, name="account_switch"),
]
