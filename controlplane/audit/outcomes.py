"""What became of the changes a request was allowed to make. An allowed change's audit row is
written when it is authorized, before the change is tried; its outcome (succeeded, or failed with
the error) is filled in once the request's answer is known:

- rows written inside ``audited_transaction`` are written as succeeded and, should the block fail
  and roll back, written again as failed with its error (no extra statement on the hot path);
- every other allowed change of a request is settled by ``AuditOutcomeMiddleware`` from the
  answer: a failure a view noted (``note_failure``: a form that showed the service's refusal), or
  the status of the response (the API's ``{detail}`` says why), in one UPDATE.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field

from django.http import HttpRequest, HttpResponse
from pydantic import ValidationError

from .models import AuditEvent

MAX_ERROR = 1000


@dataclass
class _Request:
    events: list[AuditEvent] = field(default_factory=list)  # allowed changes, outcome unknown
    failure: str | None = None


_current: ContextVar[_Request | None] = ContextVar("audit_outcomes", default=None)


def needs_outcome(event: AuditEvent) -> bool:
    return event.allowed and event.mutating and not event.outcome


def follow(event: AuditEvent) -> None:
    """Settle ``event`` (just written) with the request's answer; outside a request it stays
    as written."""
    state = _current.get()
    if state is not None:
        state.events.append(event)


def note_failure(detail: str) -> None:
    """The change the request was allowed was refused by the service (a view that shows the
    error instead of raising it): its allowed changes are recorded as failed with ``detail``."""
    state = _current.get()
    if state is not None and state.failure is None:
        state.failure = detail


def error_text(exc: BaseException) -> str:
    """An exception as the audit log says it (a refused request: the field and what is wrong)."""
    if isinstance(exc, ValidationError) and exc.error_count():
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ()))
        text = f"{where}: {first.get('msg', 'invalid')}" if where else first.get("msg", "")
        return text[:MAX_ERROR]
    detail = getattr(exc, "detail", None)
    text = str(detail) if detail else (str(exc).splitlines() or [""])[0]
    return (text or type(exc).__name__)[:MAX_ERROR]


def _failure_of(response: HttpResponse) -> str | None:
    data = getattr(response, "data", None)  # a DRF answer: {"detail", "code", "field"}
    if isinstance(data, dict) and data.get("detail"):
        return str(data["detail"])
    if response.status_code >= 400:
        return f"answered {response.status_code} {response.reason_phrase}"
    return None


class AuditOutcomeMiddleware:
    """Record, for each request, whether the changes it was allowed succeeded."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        state = _Request()
        token = _current.set(state)
        try:
            response = self.get_response(request)
        finally:
            _current.reset(token)
        if state.events:
            failure = state.failure or _failure_of(response)
            ids = [e.pk for e in state.events if e.pk is not None]
            outcome = AuditEvent.Outcome.FAILED if failure else AuditEvent.Outcome.SUCCEEDED
            AuditEvent.objects.filter(pk__in=ids, outcome="").update(
                outcome=outcome, error=(failure or "")[:MAX_ERROR]
            )
        return response
