"""Periodic housekeeping: declare dead the workers silent past their lease (their models move),
expire idle sessions (their models are unloaded), old checkpoints and
their model package versions, recorded sampled sequences past their day, apply groups' retention
rules, delete KMS keys past their deletion date, place models that wait for a worker, prune the
audit log, drained login and sign-up throttles and finished request-rate windows, meter closed
hours of checkpoint storage, check budgets' thresholds and send their webhooks, and push closed
usage windows to Stripe when a key is configured."""

from __future__ import annotations

import logging
import threading

from django.db import close_old_connections

from controlplane.audit.services import audit_prune
from controlplane.billing.services import billing_push
from controlplane.budgets.alerts import budgets_check
from controlplane.budgets.services import holds_prune
from controlplane.budgets.webhooks import deliveries_send
from controlplane.kms.services import keys_purge
from controlplane.metering.storage import storage_meter
from controlplane.operations.session_end import sessions_expire_idle
from controlplane.quotas.ratelimit import request_counts_prune
from controlplane.registry.lifecycle import retention_apply
from controlplane.registry.services import packages_expire
from controlplane.tenants.throttles import throttles_prune
from controlplane.training_sessions.services.failover import workers_declare_dead
from controlplane.training_sessions.services.placement import (
    models_place_waiting,
    samplers_place_waiting,
)
from controlplane.training_sessions.services.recordings import recordings_expire
from controlplane.training_sessions.services.retention import checkpoints_expire

log = logging.getLogger("loopwright.janitor")


def sweep(*, push_billing: bool = True) -> dict:
    dead = workers_declare_dead(by="janitor")  # first: their models move before anything else
    expired = sessions_expire_idle()
    if expired:
        log.info("expired %d idle sessions: %s", len(expired), ", ".join(expired))
    checkpoints = checkpoints_expire()
    if checkpoints:
        log.info("deleted %d expired checkpoints", len(checkpoints))
    recorded = recordings_expire()
    if recorded:
        log.info("deleted %d expired recorded samples", recorded)
    packages = packages_expire()
    if packages:
        log.info("deleted %d expired model package versions", len(packages))
    retained = retention_apply()
    if retained:
        log.info("deleted the weights of %d versions past their retention", len(retained))
    keys = keys_purge()
    if keys:
        log.info("deleted %d KMS keys past their deletion date: %s", len(keys), ", ".join(keys))
    placed = models_place_waiting()  # after expiry, so expired sessions' models do not wait
    if placed:
        log.info("placed %d models that waited for a worker", len(placed))
    samplers = samplers_place_waiting()
    if samplers:
        log.info("placed %d samplers that waited for a worker", len(samplers))
    pruned = audit_prune()
    if pruned:
        log.info("pruned %d audit events past retention", pruned)
    throttles_prune()
    request_counts_prune()
    holds_prune()
    storage_meter()  # before the push, which carries its usage like any meter's
    alerts = budgets_check()
    if alerts:
        log.info("%d budget thresholds reached", len(alerts))
    # last: a receiver or Stripe being slow or away never holds up the rest
    webhooks, _ = deliveries_send()
    sent = billing_push().sent if push_billing else 0
    return {
        "dead_workers": dead,
        "pruned_audit_events": pruned,
        "expired_sessions": expired,
        "expired_checkpoints": checkpoints,
        "expired_recordings": recorded,
        "expired_packages": packages,
        "retained_checkpoints": retained,
        "budget_alerts": len(alerts),
        "budget_webhooks_sent": webhooks,
        "deleted_keys": keys,
        "placed_models": placed,
        "stripe_meter_events_sent": sent,
    }


def run_forever(stop: threading.Event, every_seconds: float = 15.0) -> None:
    while not stop.wait(every_seconds):
        try:
            sweep()
        except Exception:
            log.exception("janitor sweep failed")
        finally:
            close_old_connections()
