"""What the tenants app announces to the apps above it (it imports none of them)."""

from __future__ import annotations

from django.dispatch import Signal

# A person did something to their own login (signed in, changed their password); sent with
# ``user``, ``action`` (an action of the catalogue, e.g. ``auth:Login``), ``reason`` and
# ``source_ip``, inside the transaction that did it. The audit log records it (``iam.own_logins``).
own_login_event = Signal()

# A membership is about to be removed; sent with ``membership`` inside the transaction that
# removes it. IAM revokes the member's API keys in that tenant (``iam.services``).
membership_removed = Signal()
