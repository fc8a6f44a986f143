"""A session's failovers in plain words: which worker was lost and when, who noticed, where the
model went, what it resumed from (the optimizer step of its recovery point), what it replayed and
how long it took, from the control plane's Recovery rows."""

from __future__ import annotations

from dataclasses import dataclass

from controlplane.tenants.models import Tenant
from controlplane.training_sessions.models import Recovery, Session
from controlplane.training_sessions.selectors import session_recoveries

from .session_ops import step_counter
from .values import plural, seconds

WHAT_HAPPENED = {
    Recovery.Cause.WORKER_LOST: "was lost (silent past its lease)",
    Recovery.Cause.WORKER_RESTARTED: "was restarted",
    Recovery.Cause.WORKER_STOPPED: "stopped and handed its models over",
    Recovery.Cause.STATE_UNRECORDED: "could not record a result",
}
POINTS = {"snapshot": "its snapshot", "save": "its saved state", "start": "its start"}


@dataclass
class Failover:
    recovery: Recovery
    lost: str  # "Worker gpu0 was lost (silent past its lease), noticed by gpu1."
    outcome: str  # "The model resumed on gpu1 from its snapshot after step 12, …"
    state: str  # restored | restoring | failed | ended (for the badge)


def _point(recovery: Recovery, steps_before) -> str:
    kind = recovery.recovery_kind or "start"
    if recovery.recovery_seq is None or kind == "start":
        return "from its start (it had no recovery point yet)"
    steps = steps_before(recovery.model_id, recovery.recovery_seq + 1)
    where = POINTS.get(kind, kind)
    return f"from {where} after step {steps} (operation {recovery.recovery_seq})"


def _outcome(r: Recovery, steps_before) -> str:
    target = f"on {r.to_worker}" if r.to_worker else "on a new worker"
    if r.outcome == Recovery.Outcome.RESTORED:
        parts = [f"The model resumed {target} {_point(r, steps_before)}"]
        if r.replayed:
            parts.append(f"replayed {plural(r.replayed, 'operation')} completed since")
        if r.seconds is not None:
            parts.append(f"back {seconds(r.seconds)} after the loss was noticed")
        return ", ".join(parts) + "."
    if r.outcome == Recovery.Outcome.RESTORING:
        if r.to_worker:
            return f"Being restored {target} {_point(r, steps_before)}…"
        return "Waiting for a worker that serves its base model to take it over…"
    if r.outcome == Recovery.Outcome.FAILED:
        return f"It could not be restored: {r.error or 'no reason was recorded'}."
    return "The model was unloaded before anything needed it back."


def failovers(*, tenant: Tenant, session: Session) -> list[Failover]:
    """The session's failovers, newest first, each said in plain words."""
    found = [r for r in session_recoveries(session) if r.tenant_id == tenant.id]
    steps_before = step_counter(tenant=tenant, model_ids={r.model_id for r in found})
    out = []
    for r in found:
        noticed = (
            f", noticed by {r.declared_by}"
            if r.declared_by and r.declared_by != r.from_worker
            else ""
        )
        moved = f" {plural(r.requeued, 'queued operation')} moved with it." if r.requeued else ""
        lost = (
            f"Worker {r.from_worker} {WHAT_HAPPENED.get(r.cause, r.cause)} at "
            f"{r.declared_at:%H:%M:%S} UTC on {r.declared_at:%Y-%m-%d}{noticed}.{moved}"
        )
        out.append(Failover(r, lost, _outcome(r, steps_before), r.outcome))
    return out
