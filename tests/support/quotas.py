"""An account's quotas, set as an operator sets them."""

from __future__ import annotations

from io import StringIO

from django.core.management import call_command


def set_quota(person, *args: str) -> str:
    """``manage.py set_quota --account <person's account> *args``; what it printed."""
    out = StringIO()
    call_command("set_quota", "--account", person.tenant.account_id, *args, stdout=out)
    return out.getvalue()
