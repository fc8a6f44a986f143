"""A session's operations for its page: one page of them, newest first, filtered by kind and
status, each with the tokens it was metered and the optimizer step it belongs to. Every read is
scoped to one tenant."""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from django.core.paginator import Page, Paginator
from django.db.models import Sum

from controlplane.metering.models import UsageRecord
from controlplane.tenants.models import Tenant
from controlplane.training_sessions.models import Operation, Session

PER_PAGE = 25
KINDS = Operation.Kind.choices
STATUSES = Operation.Status.choices
# how kinds read in a table (the wire names stay in the API)
KIND_LABELS = {
    Operation.Kind.CREATE_MODEL: "create model",
    Operation.Kind.FORWARD: "forward",
    Operation.Kind.FORWARD_BACKWARD: "forward + backward",
    Operation.Kind.OPTIM_STEP: "optimizer step",
    Operation.Kind.SAVE_WEIGHTS: "save state",
    Operation.Kind.SAVE_WEIGHTS_FOR_SAMPLER: "save for sampling",
    Operation.Kind.LOAD_WEIGHTS: "load state",
    Operation.Kind.UNLOAD_MODEL: "unload model",
    Operation.Kind.SAMPLE: "sample",
    Operation.Kind.MISSING: "missing (never arrived)",
}
TRAINING = (Operation.Kind.FORWARD_BACKWARD, Operation.Kind.FORWARD, Operation.Kind.OPTIM_STEP)


@dataclass
class OperationRow:
    id: str
    kind: str
    seq_id: int | None
    status: str
    model_id: str | None
    sampler_id: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error: str
    error_category: str
    tokens: int = 0
    step: int | None = None  # the optimizer step it belongs to (1-based); None: not training

    @property
    def duration_s(self) -> float | None:
        if self.started_at and self.finished_at:
            return (self.finished_at - self.started_at).total_seconds()
        return None

    @property
    def kind_label(self) -> str:
        return KIND_LABELS.get(self.kind, self.kind.replace("_", " "))


def step_counter(*, tenant: Tenant, model_ids: set[str]):
    """A function (model id, seq_id) → how many optimizer steps of the model finished before
    that seq_id: the training step an operation belongs to is that count + 1."""
    done: dict[str, list[int]] = defaultdict(list)
    for model_id, seq_id in (
        Operation.objects.filter(
            tenant=tenant,
            model_id__in=model_ids,
            kind=Operation.Kind.OPTIM_STEP,
            status=Operation.Status.DONE,
        )
        .order_by("model_id", "seq_id")
        .values_list("model_id", "seq_id")
    ):
        done[model_id].append(seq_id)

    def before(model_id: str, seq_id: int) -> int:
        return bisect_left(done.get(model_id, []), seq_id)

    return before


def operations_page(
    *,
    tenant: Tenant,
    session: Session,
    kind: str = "",
    status: str = "",
    number: int | str | None = 1,
) -> tuple[Page, list[OperationRow]]:
    """Page ``number`` of the session's operations (newest first) of ``kind`` and ``status``
    (empty: any), and its rows."""
    qs = Operation.objects.filter(tenant=tenant, session=session)
    if kind:
        qs = qs.filter(kind=kind)
    if status:
        qs = qs.filter(status=status)
    page = Paginator(qs.order_by("-created_at", "-seq_id", "-id").only("id"), PER_PAGE).get_page(
        number
    )
    ids = [op.id for op in page.object_list]
    found = {
        op["id"]: op
        for op in Operation.objects.filter(tenant=tenant, id__in=ids).values(
            "id",
            "kind",
            "seq_id",
            "status",
            "model_id",
            "sampling_session_id",
            "created_at",
            "started_at",
            "finished_at",
            "error",
            "error_category",
        )
    }
    rows = [
        OperationRow(
            id=op["id"],
            kind=op["kind"],
            seq_id=op["seq_id"],
            status=op["status"],
            model_id=op["model_id"],
            sampler_id=op["sampling_session_id"],
            created_at=op["created_at"],
            started_at=op["started_at"],
            finished_at=op["finished_at"],
            error=op["error"],
            error_category=op["error_category"],
        )
        for op in (found[i] for i in ids)
    ]
    tokens = dict(
        UsageRecord.objects.filter(tenant=tenant, operation_id__in=ids)
        .values("operation_id")
        .annotate(q=Sum("quantity"))
        .values_list("operation_id", "q")
    )
    before = step_counter(tenant=tenant, model_ids={r.model_id for r in rows if r.model_id})
    for row in rows:
        row.tokens = tokens.get(row.id) or 0
        if row.model_id and row.seq_id is not None and row.kind in TRAINING:
            row.step = before(row.model_id, row.seq_id) + 1
    return page, rows
