"""What the Tinker protocol records beside the sessions app's own rows: the reason a client gave
when it finished its session (``sessions/<id>/finish``, tinker SDK >= 0.26)."""

from __future__ import annotations

from django.db import models


class SessionFinish(models.Model):
    """A client's own account of how its session ended; the first one given stands."""

    class Reason(models.TextChoices):
        SUCCESS = "success"
        ERRORED = "errored"
        INTERRUPTED = "interrupted"

    session = models.OneToOneField(
        "training_sessions.Session",
        primary_key=True,
        on_delete=models.CASCADE,
        related_name="client_finish",
    )
    reason = models.CharField(max_length=16, choices=Reason.choices)
    detail = models.TextField(blank=True)
    finished_at = models.DateTimeField(auto_now_add=True)
