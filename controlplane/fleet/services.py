"""Worker registration (with the networks a worker reaches), leases renewed by heartbeats, and
the choice of a worker for a model: its base model, the session's network, and free room."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import connection
from django.db.models import BooleanField, Case, DateTimeField, Exists, ExpressionWrapper, When
from django.db.models.functions import Now
from django.utils import timezone

from loopwright.types.vpc import SECURITY_GROUP_ID_PATTERN, SUBNET_ID_PATTERN

from .models import BaseModel, Worker


class NoWorkerAvailable(Exception):
    """No live worker can take the model now; ``cause`` says which test none passed."""

    NO_WORKER, NETWORK, CAPACITY = "no_worker", "network", "capacity"

    def __init__(self, base_model: str, reason: str, *, cause: str) -> None:
        super().__init__(reason)
        self.base_model = base_model
        self.reason = reason
        self.cause = cause


@dataclass(frozen=True)
class Network:
    """Where a session's work may run: the open network (no subnets), or a worker that reaches
    at least one of ``subnets`` and offers every one of ``security_group_ids``."""

    subnets: tuple[str, ...] = ()
    security_group_ids: tuple[str, ...] = ()

    @classmethod
    def of(cls, vpc_config: dict | None) -> Network:
        vpc = vpc_config or {}
        return cls(tuple(vpc.get("subnets") or ()), tuple(vpc.get("security_group_ids") or ()))

    @property
    def is_open(self) -> bool:
        return not self.subnets

    def reached_by(self, worker: Worker) -> bool:
        if self.is_open:
            return not worker.subnet_ids  # a VPC worker serves only sessions in its subnets
        return not set(self.subnets).isdisjoint(worker.subnet_ids)

    def admits(self, worker: Worker) -> bool:
        return self.reached_by(worker) and set(self.security_group_ids) <= set(
            worker.security_group_ids
        )

    def words(self) -> str:
        """The network in words: "open network", or its subnets and security groups."""
        if self.is_open:
            return "open network"
        return f"{_joined(self.subnets, 'or')} with {_joined(self.security_group_ids, 'and')}"

    def wanted(self) -> str:
        if self.is_open:
            return "an open-network worker"
        groups = _joined(self.security_group_ids, "and")
        return f"a worker that reaches {_joined(self.subnets, 'or')} with {groups}"

    def mismatch(self, serving: Sequence[Worker]) -> str:
        """Why none of ``serving`` (the live workers of the base model) will do."""
        if self.is_open:
            return "each serves only sessions in its VPC subnets"
        reaching = sum(self.reached_by(w) for w in serving)
        if not reaching:
            return "none reaches these subnets"
        reach = _n(reaching, "reaches", "reach")
        return f"{reach} these subnets but none offers all these security groups"


def _joined(items: Iterable[str], last: str) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {last} {items[-1]}"


def _n(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _network_ids(
    subnet_ids: Sequence[str], security_group_ids: Sequence[str]
) -> tuple[list[str], list[str]]:
    """A worker's networks, each id checked as a session's is, repeats dropped."""
    kinds = (
        ("subnet", SUBNET_ID_PATTERN, subnet_ids),
        ("security group", SECURITY_GROUP_ID_PATTERN, security_group_ids),
    )
    for what, pattern, ids in kinds:
        bad = [value for value in ids if not pattern.fullmatch(value)]
        if bad:
            raise ValueError(f"not {what} ids ({pattern.pattern}): {', '.join(bad)}")
    if security_group_ids and not subnet_ids:
        raise ValueError(
            "security groups need a subnet: a worker without one is on the open network"
        )
    return list(dict.fromkeys(subnet_ids)), list(dict.fromkeys(security_group_ids))


def lease_now():
    """The time leases are measured against: the database's clock on PostgreSQL (so hosts whose
    clocks disagree still agree on who is live), this process's elsewhere (one machine)."""
    if connection.vendor == "postgresql":
        return Now()
    return timezone.now()


def _lease_end():
    lease = timedelta(seconds=settings.WORKER_LEASE_SECONDS)
    if connection.vendor == "postgresql":
        return ExpressionWrapper(Now() + lease, output_field=DateTimeField())
    return timezone.now() + lease


@dataclass(frozen=True)
class Registration:
    """A worker process's registration: its row, the generation it works under, and what the
    row said before (an ``active`` previous incarnation was never declared dead)."""

    worker: Worker
    generation: int
    previous_state: str | None
    previous_generation: int | None
    previous_group: int | None = None  # the replica group its previous incarnation was in


def worker_register(
    *,
    name: str,
    queue: str,
    base_model: str,
    description: str,
    context_length: int,
    chat_template: str | None,
    tokenizer_files: dict[str, str],
    tokenizer_path: str,
    capacity: int,
    device: str,
    subnet_ids: Sequence[str] = (),
    security_group_ids: Sequence[str] = (),
    vocab_size: int | None = None,
    image_tokens: int | None = None,
    address: str = "",
    memory_bytes: int | None = None,
    shard_ranks: int = 1,
    base_memory_bytes: int | None = None,
) -> Registration:
    """Record the worker and what it serves, under a new generation with a fresh lease; runs in
    the caller's transaction. ``subnet_ids`` empty: the open network. ``shard_ranks`` > 1: its
    ``memory_bytes`` do not hold the base whole (``base_memory_bytes``), it serves only in a
    sharded group of that many workers."""
    if shard_ranks < 1:
        raise ValueError(f"shard_ranks must be at least 1, not {shard_ranks}")
    subnet_ids, security_group_ids = _network_ids(subnet_ids, security_group_ids)
    BaseModel.objects.update_or_create(
        name=base_model,
        defaults={
            "description": description,
            "context_length": context_length,
            "chat_template": chat_template,
            "tokenizer_files": tokenizer_files,
            "tokenizer_path": tokenizer_path,
            "image_tokens": image_tokens,
            **({"vocab_size": vocab_size} if vocab_size is not None else {}),
            **({"memory_bytes": base_memory_bytes} if base_memory_bytes is not None else {}),
        },
    )
    now = timezone.now()
    fields = {
        "queue": queue,
        "base_model_id": base_model,
        "capacity": capacity,
        "device": device,
        "subnet_ids": subnet_ids,
        "security_group_ids": security_group_ids,
        "address": address,
        "memory_bytes": memory_bytes,
        "shard_ranks": shard_ranks,
        "group": None,  # a new process belongs to no group; the old one's group ends
        "rank": None,
        "state": Worker.State.ACTIVE,
        "started_at": now,
        "last_heartbeat_at": now,
    }
    worker = Worker.objects.select_for_update().filter(name=name).first()
    if worker is None:
        worker = Worker.objects.create(name=name, generation=1, **fields)
        before: tuple[str | None, int | None, int | None] = (None, None, None)
    else:
        before = (worker.state, worker.generation, worker.group_id)
        for key, value in fields.items():
            setattr(worker, key, value)
        worker.generation += 1
        worker.save()
    Worker.objects.filter(pk=worker.pk).update(lease_expires_at=_lease_end())
    worker.refresh_from_db(fields=["lease_expires_at"])
    return Registration(worker, worker.generation, *before)


def worker_renew(*, worker_id: int, generation: int) -> bool:
    """The heartbeat: extend the lease of ``generation``. False: the worker was declared dead
    (or started again elsewhere under its name); it must drop what it holds and register anew."""
    return bool(
        Worker.objects.filter(
            pk=worker_id, generation=generation, state=Worker.State.ACTIVE
        ).update(last_heartbeat_at=timezone.now(), lease_expires_at=_lease_end())
    )


def holds_lease(*, worker_id: int, generation: int) -> bool:
    """Whether ``generation`` is still the worker's (nobody declared it dead meanwhile)."""
    return Worker.objects.filter(
        pk=worker_id, generation=generation, state=Worker.State.ACTIVE
    ).exists()


def live_workers():
    return Worker.objects.filter(state=Worker.State.ACTIVE, lease_expires_at__gte=lease_now())


# A worker renews its lease every fifth of it (``workers/runtime.py``). One silent for more than
# half its lease has missed two beats and more: it may well be gone (killed, partitioned) though
# its lease has not run out yet, and no placement chooses it (a model moved there would wait
# for that lease to run out, then move again). One silent for no longer than a beat and a half
# is fresh: placement prefers it to one that is merely live.
PLACEABLE_SILENCE = 0.5  # of the lease: the longest silence a placement accepts
FRESH_SILENCE = 0.3  # of the lease: the longest silence that still counts as fresh


def _renewed_within(fraction: float):
    """The earliest end a lease renewed within ``fraction`` of its length ago has: its last
    renewal set it to that moment plus the lease."""
    ahead = timedelta(seconds=(1 - fraction) * settings.WORKER_LEASE_SECONDS)
    if connection.vendor == "postgresql":
        return ExpressionWrapper(Now() + ahead, output_field=DateTimeField())
    return timezone.now() + ahead


def placeable_workers():
    """The live workers a placement may choose: silent for no more than ``PLACEABLE_SILENCE``
    of the lease (measured on the lease's clock), each annotated ``fresh`` when silent for no
    more than ``FRESH_SILENCE`` of it."""
    return (
        live_workers()
        .filter(lease_expires_at__gte=_renewed_within(PLACEABLE_SILENCE))
        .annotate(
            fresh=Case(
                When(lease_expires_at__gte=_renewed_within(FRESH_SILENCE), then=True),
                default=False,
                output_field=BooleanField(),
            )
        )
    )


def expired_workers():
    """Workers still marked active whose lease has run out: dead until they say otherwise."""
    return Worker.objects.filter(state=Worker.State.ACTIVE, lease_expires_at__lt=lease_now())


@dataclass(frozen=True)
class Fence:
    """A worker process's right to act: its row and the generation it registered under. Every
    claim and completion carries it, and changes nothing once the generation is not current.

    On PostgreSQL the check also holds the worker's row (``FOR KEY SHARE``, which a heartbeat's
    update does not wait for) until the statement's transaction ends, so a declaration of death
    (which locks the row ``FOR UPDATE``) waits for the claims and completions in flight, and
    they, once it commits, find the generation gone.
    """

    worker_id: int
    generation: int

    def sql(self) -> tuple[str, list]:
        """A condition (and its parameters) that holds while the fence does."""
        table = connection.ops.quote_name(Worker._meta.db_table)
        lock = " FOR KEY SHARE" if connection.vendor == "postgresql" else ""
        condition = (
            f"EXISTS (SELECT 1 FROM {table} fw WHERE fw.id = %s "  # noqa: S608 — identifiers from the models' metadata, every value a bound parameter
            f"AND fw.generation = %s AND fw.state = %s{lock})"
        )
        return condition, [self.worker_id, self.generation, Worker.State.ACTIVE]

    def q(self) -> Exists:
        """The same condition for the ORM, without the lock (SQLite serialises writers)."""
        return Exists(
            Worker.objects.filter(
                pk=self.worker_id, generation=self.generation, state=Worker.State.ACTIVE
            )
        )

    def lock(self) -> bool:
        """Inside a transaction: whether the fence holds, keeping it so until the commit."""
        condition, params = self.sql()
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {condition}", params)
            return bool(cursor.fetchone()[0])

    def holds(self) -> bool:
        return holds_lease(worker_id=self.worker_id, generation=self.generation)
