"""A tag, as budgets and usage reports name a group of sessions (a project, a run): ``label``
matches a session with that string among its ``tags``; ``key=value`` also matches a session whose
``user_metadata`` has ``key`` set to the string ``value`` (where SageMaker's ``Tags`` land)."""

from __future__ import annotations

from django.db import connection
from django.db.models import Q, QuerySet

from controlplane.errors import DomainError
from controlplane.tenants.models import Tenant

from .models import Session

MAX_TAG = 256  # as long as a session's tag may be


def tag_checked(tag: object, *, field: str = "tag") -> str:
    """``tag`` if it can name sessions: text of 1 to 256 characters without control characters;
    else a 400 naming ``field``."""
    if not isinstance(tag, str) or not 1 <= len(tag) <= MAX_TAG:
        raise DomainError(f"{field}: a tag of 1 to {MAX_TAG} characters", field=field)
    if any(ord(c) < 32 or ord(c) == 127 for c in tag):
        raise DomainError(f"{field}: no control characters", field=field)
    return tag


def _pair(tag: str) -> tuple[str, str] | None:
    key, sep, value = tag.partition("=")
    return (key, value) if sep and key else None


def session_has_tag(session: Session, tag: str) -> bool:
    if tag in (session.tags or ()):
        return True
    pair = _pair(tag)
    metadata = session.user_metadata if isinstance(session.user_metadata, dict) else {}
    return pair is not None and metadata.get(pair[0]) == pair[1]


def sessions_tagged(*, tenant: Tenant, tag: str) -> QuerySet | list[str]:
    """The ids of the tenant's sessions ``tag`` matches: a query for the database to join on
    PostgreSQL (JSON containment), a list elsewhere."""
    sessions = Session.objects.filter(tenant=tenant)
    if connection.vendor == "postgresql":
        match = Q(tags__contains=[tag])
        pair = _pair(tag)
        if pair is not None:
            match |= Q(user_metadata__contains={pair[0]: pair[1]})
        return sessions.filter(match).values("id")
    rows = sessions.only("id", "tags", "user_metadata")
    return [s.id for s in rows.iterator() if session_has_tag(s, tag)]
