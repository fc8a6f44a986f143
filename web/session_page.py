"""One session's page, in three live parts that reload on their own while the session runs:
the summary (state, models, failovers, checkpoints, cost), the curves (smoothing, log scale,
other runs of its group to compare with) and the operations (a page of them, filtered by kind
and status). Each part keeps the page's query, so a reload shows what the person chose."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, Max, Sum
from django.http import HttpRequest, QueryDict

from controlplane.edge.callers import can, may
from controlplane.iam.resources import session_arn
from controlplane.metering.reports import session_usage
from controlplane.training_sessions.models import Operation, Session, TrainingModel
from controlplane.training_sessions.queue_status import model_queue_status, sampler_queue_status
from controlplane.training_sessions.selectors import failure_reasons, model_replica_group
from loopwright.types import QueueStatus

from . import session_ops
from . import session_reads as reads
from .charts import line_chart
from .failovers import failovers
from .snippets import session_snippet
from .values import number

LIVE = (*Session.LIVE_STATES, Session.State.STOPPING)  # states whose page refreshes itself
SMOOTHING = (("0", "off"), ("0.6", "0.6"), ("0.8", "0.8"), ("0.9", "0.9"), ("0.95", "0.95"))
SCALES = (("linear", "linear"), ("log", "logarithmic"))
LORA_ORDER = (
    "rank",
    "alpha",
    "seed",
    "train_attn",
    "train_mlp",
    "train_unembed",
    "train_projector",
)
LORA_NAMES = {
    "rank": "rank",
    "alpha": "alpha",
    "seed": "seed",
    "train_attn": "adapts attention",
    "train_mlp": "adapts MLP",
    "train_unembed": "adapts unembedding",
    "train_projector": "adapts the vision projector",
}


@dataclass
class View:
    """What the person chose to see (from the query), checked."""

    kind: str
    status: str
    page: str
    smooth: float
    log_y: bool
    compare: list[str]

    @property
    def smooth_value(self) -> str:
        return next((v for v, _ in SMOOTHING if float(v) == self.smooth), "0")

    @classmethod
    def of(cls, q: QueryDict) -> View:
        kind = q.get("kind", "")
        status = q.get("status", "")
        smooth = q.get("smooth", "0")
        return cls(
            kind=kind if kind in dict(session_ops.KINDS) else "",
            status=status if status in dict(session_ops.STATUSES) else "",
            page=q.get("page", "1"),
            smooth=float(smooth) if smooth in dict(SMOOTHING) else 0.0,
            log_y=q.get("scale") == "log",
            compare=q.getlist("compare")[: reads.COMPARE_LIMIT],
        )


def lora_view(lora: dict) -> list[tuple[str, str]]:
    """The adapter's settings in words, the usual ones first, yes/no for switches; nothing that
    is not set."""
    keys = [k for k in LORA_ORDER if k in lora] + sorted(set(lora) - set(LORA_ORDER))
    return [
        (LORA_NAMES.get(k, k.replace("_", " ")), str(lora[k]) if k == "seed" else number(lora[k]))
        for k in keys
        if lora[k] is not None
    ]


def loading(model: TrainingModel) -> dict | None:
    """A placed model still being created: its worker loads the base model and sets up the
    adapter, and the model's first operations wait for it. Which worker, and since when (None:
    not loading)."""
    if model.state != TrainingModel.State.CREATING or model.placement != model.Placement.PLACED:
        return None
    first = (
        Operation.objects.filter(model=model, kind=Operation.Kind.CREATE_MODEL)
        .order_by("seq_id")
        .only("status", "started_at", "created_at")
        .first()
    )
    return {
        "worker": model.worker.name if model.worker else None,
        "started": (first.started_at or first.created_at) if first else model.created_at,
        "claimed": bool(first and first.started_at),
    }


def models_view(models: list[TrainingModel]) -> list[dict]:
    return [
        {
            "model": m,
            "loading": loading(m),
            "waiting": m.placement in TrainingModel.WAITING and m.state in m.LIVE_STATES,
            "queue": model_queue_status(m),  # its place in line while it waits
            "lora": lora_view(m.lora),
            "group": group_view(m),
        }
        for m in models
    ]


def queued_samplers(session: Session) -> list[tuple[str, QueueStatus]]:
    """The session's samplers that wait in the placement queue, with their place."""
    waiting = session.sampling_sessions.filter(worker__isnull=True, live_model__isnull=True)
    return [
        (sampler.id, status)
        for sampler in waiting.select_related("session").order_by("created_at")
        if (status := sampler_queue_status(sampler)) is not None
    ]


def group_view(model: TrainingModel) -> dict | None:
    """The group of workers a model trains on (data parallel, or a base sharded over them): its
    state, kind and members by rank."""
    found = model_replica_group(model)
    if found is None:
        return None
    group, members = found
    return {
        "state": group.state,
        "sharded": group.sharded,
        "members": [(w.name, w.rank) for w in members],
    }


def summary(request: HttpRequest, session: Session, models: list[TrainingModel]) -> dict:
    """The summary part: state, failure, models, failovers, checkpoints, usage."""
    tenant = request.tenant
    may_list = may(request, "sessions:ListCheckpoints", session_arn(tenant, session.id))
    checkpoints = reads.checkpoint_rows(tenant=tenant, session=session) if may_list else None
    counts = reads.operation_count(tenant=tenant, session=session)
    shown = models_view(models)
    return {
        "failure": failure_reasons(tenant=tenant, sessions=[session]).get(session.id, ""),
        "models": shown,
        "queued_samplers": queued_samplers(session),
        "counts": counts,
        "operations_total": sum(counts.values()),
        "models_loading": sum(1 for m in shown if m["loading"]),
        "failovers": failovers(tenant=tenant, session=session),
        "checkpoints": checkpoints,
        "usage": session_usage(tenant=tenant, session_id=session.id),
    }


def curves(request: HttpRequest, session: Session, models, view: View) -> dict:
    """The curves part: loss and rewards per optimizer step, as the person asked to see them."""
    tenant = request.tenant
    runs = reads.group_runs(tenant=tenant, session=session)
    chosen = [r for r in runs if r.id in view.compare]
    found = reads.curves(tenant=tenant, session=session, models=models, compare=chosen)
    options = {"x_label": found.x_label, "smooth": view.smooth}
    return {
        "loss_chart": (
            line_chart("Loss per token", found.loss, log_y=view.log_y, **options)
            if found.loss
            else None
        ),
        "reward_chart": line_chart("Rewards", found.rewards, **options) if found.rewards else None,
        "group": reads.group_of(session),
        "runs": runs,
        "chosen": {r.id for r in chosen},
        "smoothing": SMOOTHING,
        "scales": SCALES,
        "smooth_value": view.smooth_value,
        "scale_value": "log" if view.log_y else "linear",
    }


def operations(request: HttpRequest, session: Session, view: View) -> dict:
    """The operations part: one page, newest first, of the kind and status asked for."""
    page, rows = session_ops.operations_page(
        tenant=request.tenant,
        session=session,
        kind=view.kind,
        status=view.status,
        number=view.page,
    )
    query = request.GET.copy()
    query.pop("page", None)
    query.pop("part", None)
    return {
        "ops_page": page,
        "ops": rows,
        "ops_query": query.urlencode(),
        "kind_labels": [
            (k, session_ops.KIND_LABELS.get(k, label)) for k, label in session_ops.KINDS
        ],
        "statuses": session_ops.STATUSES,
        "view": view,
    }


def stop_state(request: HttpRequest, session: Session) -> dict:
    """Whether the Stop button shows, and whether the person may press it."""
    return {
        "stoppable": session.state in Session.LIVE_STATES,
        "may_stop": can(
            request, "sessions:StopTrainingSession", session_arn(request.tenant, session.id)
        ),
    }


def snippet(request: HttpRequest, session: Session, models, checkpoints) -> str:
    latest = next(
        (
            row.checkpoint
            for row in checkpoints or []
            if row.checkpoint.kind == row.checkpoint.Kind.TRAINING
        ),
        None,
    )
    return session_snippet(
        base_url=request.build_absolute_uri("/").rstrip("/"),
        session=session,
        model=models[0] if models else None,
        checkpoint=latest,
    )


def origin(session: Session) -> dict | None:
    """How a session made through the SageMaker API answers there: its TrainingSessionName and
    output path (None: made through the Tinker API or this dashboard)."""
    from controlplane.sagemaker_sessions.selectors import display_name, record_of

    record = record_of(session)
    if record is None:
        return None
    return {"name": display_name(session), "output_path": record.output_path}


def recordings(session: Session) -> dict | None:
    """The sampled sequences the session keeps for training requests to cite
    (``record_stability_info``): how many sample requests, their size, until when the last may
    be cited (None: none kept)."""
    found = session.recordings.aggregate(
        requests=Count("id"), size=Sum("size_bytes"), until=Max("expires_at")
    )
    return found if found["requests"] else None
