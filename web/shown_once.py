"""A secret shown once after a POST (a new API key, an invitation link, the first key at sign-up).

Post/redirect/get: the POST keeps the secret in the server-side session and redirects; the page
the redirect leads to takes it out and shows it. A reload of that page shows it no more and
creates nothing, and the back button never resubmits the form. The session row holds the secret
only between the two requests.
"""

from __future__ import annotations

from django.http import HttpRequest

SESSION_KEY = "loopwright_shown_once"


def keep(request: HttpRequest, kind: str, ref: str, secret: dict) -> None:
    """Hold ``secret`` for the next page that asks for ``kind`` ``ref``."""
    held = dict(request.session.get(SESSION_KEY) or {})
    held[f"{kind}:{ref}"] = secret
    request.session[SESSION_KEY] = held


def take(request: HttpRequest, kind: str, ref: str) -> dict | None:
    """The secret kept for ``kind`` ``ref``, removed from the session; None when it was shown
    already (or never kept)."""
    held = dict(request.session.get(SESSION_KEY) or {})
    secret = held.pop(f"{kind}:{ref}", None)
    if secret is not None:
        if held:
            request.session[SESSION_KEY] = held
        else:
            del request.session[SESSION_KEY]
    return secret
