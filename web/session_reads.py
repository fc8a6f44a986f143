"""What the session pages show beyond the control plane's selectors: per-session summaries, loss
and reward curves from the operations' metrics (with other runs of the session's group to compare
with), and checkpoints with the registry versions that hold them. Every read is scoped to one
tenant."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal

from django.db.models import Count, Min, Q, Sum
from django.utils import timezone

from controlplane.metering.models import TOKEN_METERS, UsageRecord
from controlplane.metering.reports import usage_report
from controlplane.registry.models import ModelPackage
from controlplane.tenants.models import Tenant
from controlplane.training_sessions.models import Checkpoint, Operation, Session, TrainingModel
from controlplane.training_sessions.queue_status import model_queue_status
from controlplane.training_sessions.selectors import failure_reasons

from .charts import Series

COMPARE_LIMIT = 8  # other runs of a group offered for comparison
REWARD_WORDS = ("reward", "return", "score")  # metric names plotted as rewards


# -- lists -------------------------------------------------------------------------------------
@dataclass
class SessionRow:
    session: Session
    base_models: list[str]
    operations: int
    tokens: int
    failure: str = ""  # why a failed session failed
    cost: Decimal = Decimal(0)  # everything it used, priced when it was used
    queue: object = None  # its waiting model's place in the placement queue (a QueueStatus)


def live_session_count(*, tenant: Tenant) -> int:
    return Session.objects.filter(tenant=tenant, state__in=Session.LIVE_STATES).count()


def session_count(*, tenant: Tenant, state: str | None = None) -> int:
    qs = Session.objects.filter(tenant=tenant)
    return (qs.filter(state=state) if state else qs).count()


def session_rows(
    *, tenant: Tenant, limit: int, offset: int = 0, state: str | None = None
) -> list[SessionRow]:
    """The tenant's sessions, newest first, with their base models, operations and tokens."""
    qs = Session.objects.filter(tenant=tenant)
    if state:
        qs = qs.filter(state=state)
    sessions = list(
        qs.annotate(n_ops=Count("operations")).order_by("-created_at")[offset : offset + limit]
    )
    ids = [s.id for s in sessions]
    bases: dict[str, list[str]] = defaultdict(list)
    for session_id, base in (
        TrainingModel.objects.filter(tenant=tenant, session_id__in=ids)
        .order_by("created_at")
        .values_list("session_id", "base_model")
    ):
        if base not in bases[session_id]:
            bases[session_id].append(base)
    tokens = dict(
        UsageRecord.objects.filter(tenant=tenant, session_id__in=ids, meter__in=TOKEN_METERS)
        .values("session_id")
        .annotate(q=Sum("quantity"))
        .values_list("session_id", "q")
    )
    reasons = failure_reasons(tenant=tenant, sessions=sessions)
    costs = session_costs(tenant=tenant, ids=ids)
    queued = session_queues(tenant=tenant, ids=ids)
    return [
        SessionRow(
            s,
            bases[s.id],
            s.n_ops,
            tokens.get(s.id) or 0,
            reasons.get(s.id, ""),
            costs.get(s.id, Decimal(0)),
            queued.get(s.id),
        )
        for s in sessions
    ]


def session_queues(*, tenant: Tenant, ids: list[str]) -> dict:
    """The place in the placement queue of each session's first model that waits for a
    worker (sessions none of whose models wait are left out)."""
    waiting = (
        TrainingModel.objects.filter(
            tenant=tenant,
            session_id__in=ids,
            worker__isnull=True,
            placement__in=TrainingModel.WAITING,
            state__in=TrainingModel.LIVE_STATES,
        )
        .select_related("session")
        .order_by("created_at")
    )
    out: dict = {}
    for model in waiting:
        if model.session_id not in out and (status := model_queue_status(model)) is not None:
            out[model.session_id] = status
    return out


def session_costs(*, tenant: Tenant, ids: list[str]) -> dict[str, Decimal]:
    """What each of the sessions ``ids`` has cost so far, priced as the bill prices it."""
    first = (
        UsageRecord.objects.filter(tenant=tenant, session_id__in=ids)
        .aggregate(at=Min("occurred_at"))["at"]
    )  # fmt: skip
    if first is None:
        return {}
    report = usage_report(
        tenant=tenant,
        start=first.date(),
        end=timezone.now().date(),
        group_by=("session",),
        session_in=ids,
    )
    out: dict[str, Decimal] = defaultdict(Decimal)
    for line in report.lines:
        out[dict(line.key)["session"]] += line.cost
    return out


# -- one session -------------------------------------------------------------------------------
def models_of(*, tenant: Tenant, session: Session) -> list[TrainingModel]:
    return list(
        TrainingModel.objects.filter(tenant=tenant, session=session)
        .select_related("worker")
        .order_by("created_at")
    )


def operation_count(*, tenant: Tenant, session: Session) -> dict[str, int]:
    """How many of the session's operations are in each status."""
    counts = (
        Operation.objects.filter(tenant=tenant, session=session)
        .values("status")
        .annotate(n=Count("id"))
        .values_list("status", "n")
    )
    return dict(counts)


# -- curves ------------------------------------------------------------------------------------
@dataclass
class Curves:
    loss: list[Series] = field(default_factory=list)  # mean loss per token, per optimizer step
    rewards: list[Series] = field(default_factory=list)  # reward-like metrics, per step
    x_label: str = "optimizer step"


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def steps_of(ops: Iterable[tuple[str, int | None, dict | None]]) -> tuple[list, dict, bool]:
    """One model's finished operations (kind, seq_id, metrics) in seq_id order → the loss points,
    the reward-like points by metric name, and whether the x axis counts optimizer steps.

    The forward_backward passes between two optim_steps are one step: its loss is their
    ``loss:sum`` over their ``tokens:sum``. A model that never stepped plots each pass by seq_id.
    """
    ops = list(ops)
    stepped = any(kind == Operation.Kind.OPTIM_STEP for kind, _, _ in ops)
    loss: list[tuple[float, float]] = []
    rewards: dict[str, list[tuple[float, float]]] = defaultdict(list)
    step, loss_sum, tokens = 1, 0.0, 0.0
    pending: dict[str, list[float]] = defaultdict(list)

    def close(x: float) -> None:
        nonlocal loss_sum, tokens
        if tokens > 0:
            loss.append((x, loss_sum / tokens))
        for name, values in pending.items():
            rewards[name].append((x, sum(values) / len(values)))
        loss_sum, tokens = 0.0, 0.0
        pending.clear()

    for kind, seq_id, metrics in ops:
        metrics = metrics if isinstance(metrics, dict) else {}
        for name, value in metrics.items():
            number = _number(value)
            if number is not None and any(w in name.lower() for w in REWARD_WORDS):
                pending[name].append(number)
        if kind == Operation.Kind.FORWARD_BACKWARD:
            part, n = _number(metrics.get("loss:sum")), _number(metrics.get("tokens:sum"))
            if part is not None and n:
                loss_sum, tokens = loss_sum + part, tokens + n
            if not stepped:
                close(float(seq_id or 0))
        elif kind == Operation.Kind.OPTIM_STEP:
            close(float(step))
            step += 1
    if stepped and (tokens or pending):  # passes after the last step: the step in progress
        close(float(step))
    return loss, dict(rewards), stepped


def curves(
    *,
    tenant: Tenant,
    session: Session,
    models: list[TrainingModel],
    compare: Iterable[Session] = (),
) -> Curves:
    """Loss and reward-like curves of each of the session's models, from the metrics the worker
    stored with each finished operation; and the loss of each session in ``compare``."""
    out = _curves_of(tenant=tenant, session=session, models=models)
    for other in compare:
        theirs = _curves_of(
            tenant=tenant, session=other, models=models_of(tenant=tenant, session=other)
        )
        label = other.name or other.id
        out.loss += [Series(f"{label} · {s.name}", s.points) for s in theirs.loss]
    return out


def _curves_of(*, tenant: Tenant, session: Session, models: list[TrainingModel]) -> Curves:
    by_model: dict[str, list] = defaultdict(list)
    for model_id, kind, seq_id, metrics in (
        Operation.objects.filter(
            tenant=tenant,
            session=session,
            status=Operation.Status.DONE,
            model__isnull=False,
            kind__in=(Operation.Kind.FORWARD_BACKWARD, Operation.Kind.OPTIM_STEP),
        )
        .order_by("model_id", "seq_id")
        .values_list("model_id", "kind", "seq_id", "result__metrics")
    ):
        by_model[model_id].append((kind, seq_id, metrics))
    out = Curves()
    several = len(by_model) > 1
    any_stepped = False
    for model in models:
        if model.id not in by_model:
            continue
        loss, rewards, stepped = steps_of(by_model[model.id])
        any_stepped = any_stepped or stepped
        prefix = f"{model.id} · " if several else ""
        if loss:
            out.loss.append(Series(f"{prefix}loss per token", loss))
        for name, points in sorted(rewards.items()):
            out.rewards.append(Series(f"{prefix}{name}", points))
    if not any_stepped and out.loss:
        out.x_label = "forward_backward seq id"
    return out


# -- checkpoints -------------------------------------------------------------------------------
@dataclass
class CheckpointRow:
    checkpoint: Checkpoint
    packages: list[ModelPackage]


def checkpoint_rows(
    *, tenant: Tenant, session: Session | None = None, limit: int | None = None
) -> list[CheckpointRow]:
    """Checkpoints, newest first (of one session, or of the whole tenant), each with the model
    package versions that hold it."""
    qs = Checkpoint.objects.filter(tenant=tenant).select_related("model")
    if session is not None:
        qs = qs.filter(model__session=session)
    qs = qs.order_by("-created_at", "-id")
    checkpoints = list(qs[:limit] if limit else qs)
    packages: dict[int, list[ModelPackage]] = defaultdict(list)
    for package in (
        ModelPackage.objects.filter(tenant=tenant, checkpoint__in=[c.id for c in checkpoints])
        .select_related("group")
        .order_by("group__name", "version")
    ):
        packages[package.checkpoint_id].append(package)
    return [CheckpointRow(c, packages[c.id]) for c in checkpoints]


# -- runs of the same group ---------------------------------------------------------------
def group_of(session: Session) -> str | None:
    """The model package group the session's checkpoints go to, by name (None: one per run)."""
    arn = (session.platform or {}).get("model_package_group_arn") or ""
    return arn.rsplit("/", 1)[-1] if "model-package-group/" in arn else None


def group_runs(*, tenant: Tenant, session: Session) -> list[Session]:
    """Other sessions of the tenant whose checkpoints go to the same group, newest first."""
    group = group_of(session)
    if group is None:
        return []
    via_packages = ModelPackage.objects.filter(tenant=tenant, group__name=group).values(
        "session_id"
    )
    return list(
        Session.objects.filter(tenant=tenant)
        .filter(
            Q(platform__model_package_group_arn__endswith=f"model-package-group/{group}")
            | Q(id__in=via_packages)
        )
        .exclude(pk=session.pk)
        .order_by("-created_at")[:COMPARE_LIMIT]
    )
