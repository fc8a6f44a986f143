"""Periodic housekeeping: expire idle sessions (their models are unloaded) and old checkpoints."""

from __future__ import annotations

import logging
import threading

from django.db import close_old_connections

from controlplane.training_sessions.services.retention import checkpoints_expire
from controlplane.training_sessions.services.sessions import sessions_expire_idle

log = logging.getLogger("loopwright.janitor")


def sweep() -> dict:
    expired = sessions_expire_idle()
    if expired:
        log.info("expired %d idle sessions: %s", len(expired), ", ".join(expired))
    checkpoints = checkpoints_expire()
    if checkpoints:
        log.info("deleted %d expired checkpoints", len(checkpoints))
    return {"expired_sessions": expired, "expired_checkpoints": checkpoints}


def run_forever(stop: threading.Event, every_seconds: float = 15.0) -> None:
    while not stop.wait(every_seconds):
        try:
            sweep()
        except Exception:
            log.exception("janitor sweep failed")
        finally:
            close_old_connections()
