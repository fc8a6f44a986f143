"""What the database knows, read when ``/metrics`` is scraped: work waiting and running by kind
and worker, how old the oldest waiting operation is, the placement queue (models waiting for a
worker, by base model and what they wait for), the fleet's leases and every failover.

Every control-plane process answers the same numbers (the database is shared): aggregate them
with ``max``, not ``sum``. The queries touch only unfinished operations (through the
``(worker, status)`` index), the workers and the failovers: cheap at any table size.
"""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Count, DurationField, ExpressionWrapper, F, Min, Q, Sum
from django.utils import timezone
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily
from prometheus_client.registry import Collector

from controlplane.fleet.models import Worker
from controlplane.training_sessions.models import Operation, Recovery, TrainingModel
from controlplane.training_sessions.queue_status import WAITS_FOR

UNFINISHED = (Operation.Status.PENDING, Operation.Status.RUNNING)
WAITING_FOR_A_WORKER = "(none)"  # the worker label of operations whose model waits for one


class DatabaseCollector(Collector):
    def collect(self) -> Iterator:
        now = timezone.now()
        yield from self._fleet(now)
        yield from self._operations(now)
        yield from self._placement_queue(now)
        yield from self._recoveries()

    def _fleet(self, now) -> Iterator:
        workers = GaugeMetricFamily(
            "loopwright_workers", "Workers known to the fleet, by state", labels=["state"]
        )
        counts = {state: 0 for state in Worker.State.values}
        for row in Worker.objects.values("state").annotate(n=Count("id")):
            counts[row["state"]] = row["n"]
        for state, n in sorted(counts.items()):
            workers.add_metric([state], n)
        yield workers
        lease = GaugeMetricFamily(
            "loopwright_worker_lease_seconds_left",
            "Seconds until each active worker's lease runs out (negative: overdue, about to be "
            "declared dead)",
            labels=["worker"],
        )
        active = Worker.objects.filter(state=Worker.State.ACTIVE).values_list(
            "name", "lease_expires_at"
        )
        for name, expires in active:
            if expires is not None:
                lease.add_metric([name], (expires - now).total_seconds())
        yield lease

    def _operations(self, now) -> Iterator:
        ops = GaugeMetricFamily(
            "loopwright_operations",
            "Unfinished operations, by kind and state (pending, running)",
            labels=["kind", "state"],
        )
        depth = GaugeMetricFamily(
            "loopwright_queue_depth",
            f"Operations waiting (pending) per worker; '{WAITING_FOR_A_WORKER}': their model "
            "waits for a worker",
            labels=["worker"],
        )
        age = GaugeMetricFamily(
            "loopwright_queue_oldest_seconds",
            "Age of the oldest operation waiting per worker",
            labels=["worker"],
        )
        live = list(Worker.objects.exclude(state=Worker.State.GONE).values_list("id", "name"))
        names = dict(live)
        rows = (
            Operation.objects.filter(status__in=UNFINISHED)
            .filter(Q(worker_id__in=list(names)) | Q(worker__isnull=True))
            .values("kind", "status", "worker_id")
            .annotate(n=Count("id"), oldest=Min("created_at"))
        )
        by_kind: dict[tuple[str, str], int] = {}
        pending: dict[str, tuple[int, float]] = {name: (0, 0.0) for name in names.values()}
        for row in rows:
            key = (row["kind"], row["status"])
            by_kind[key] = by_kind.get(key, 0) + row["n"]
            if row["status"] != Operation.Status.PENDING:
                continue
            worker = names.get(row["worker_id"], WAITING_FOR_A_WORKER)
            n, oldest = pending.get(worker, (0, 0.0))
            waited = (now - row["oldest"]).total_seconds()
            pending[worker] = (n + row["n"], max(oldest, waited))
        for kind in Operation.Kind.values:
            for state in UNFINISHED:
                ops.add_metric([kind, state], by_kind.get((kind, state), 0))
        for worker, (n, oldest) in sorted(pending.items()):
            depth.add_metric([worker], n)
            age.add_metric([worker], oldest)
        yield from (ops, depth, age)

    def _placement_queue(self, now) -> Iterator:
        waiting = GaugeMetricFamily(
            "loopwright_placement_queue",
            "Models waiting in the placement queue, by base model and what they wait for "
            "(capacity, worker, network)",
            labels=["base_model", "waits_for"],
        )
        oldest = GaugeMetricFamily(
            "loopwright_placement_queue_oldest_seconds",
            "How long the model longest in the placement queue has waited, by base model",
            labels=["base_model"],
        )
        rows = (
            TrainingModel.objects.filter(
                placement__in=TrainingModel.WAITING,
                worker__isnull=True,
                state__in=TrainingModel.LIVE_STATES,
            )
            .values("base_model", "placement")
            .annotate(n=Count("id"), since=Min("queued_at"))
        )
        longest: dict[str, float] = {}
        for row in rows:
            waiting.add_metric([row["base_model"], WAITS_FOR[row["placement"]]], row["n"])
            waited = (now - row["since"]).total_seconds() if row["since"] else 0.0
            longest[row["base_model"]] = max(longest.get(row["base_model"], 0.0), waited)
        for base_model, seconds in sorted(longest.items()):
            oldest.add_metric([base_model], seconds)
        yield from (waiting, oldest)

    def _recoveries(self) -> Iterator:
        failovers = CounterMetricFamily(
            "loopwright_failovers",
            "Models moved off a lost or stopping worker (Recovery rows), by cause and outcome",
            labels=["cause", "outcome"],
        )
        for row in Recovery.objects.values("cause", "outcome").annotate(n=Count("id")):
            failovers.add_metric([row["cause"], row["outcome"]], row["n"])
        yield failovers
        took = ExpressionWrapper(F("restored_at") - F("declared_at"), output_field=DurationField())
        done = Recovery.objects.filter(restored_at__isnull=False).aggregate(
            n=Count("id"), total=Sum(took)
        )
        summary = SummaryMetricFamily(
            "loopwright_failover_recovery_seconds",
            "From a worker declared lost to its model restored elsewhere, over every failover",
        )
        total = done["total"].total_seconds() if done["total"] is not None else 0.0
        summary.add_metric([], count_value=done["n"], sum_value=total)
        yield summary
