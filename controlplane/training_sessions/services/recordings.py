"""Recorded sampling (``record_stability_info``): the store of sampled sequences that training
requests cite in their provenance spans.

A sample request made with the option is recorded when it completes, in the same transaction (or
statement) as its result: one ``RecordedSample`` row holding its prompt once and each sequence's
sampled tokens and logprobs. A prompt's images are kept sealed with the tenant's KMS key
(``recorded_images``), never in clear; the prompt holds ``IMAGE_POSITION`` at each position an
image takes, and the sealed images count in the row's ``size_bytes``. A recording belongs to the session that sampled it; it is citable
for ``RECORDED_SEQUENCE_SECONDS`` (a day) after it was made or last cited, and bounded per tenant
by the ``recorded_bytes`` quota, checked when a recorded sample is submitted. It is deleted when
its session ends, and by the janitor once expired.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q, Sum
from django.utils import timezone

from controlplane.errors import DomainError, QuotaExceeded
from controlplane.kms.keyring import KmsError
from controlplane.quotas.limits import limits_for
from controlplane.tenants.models import Tenant

from ..models import Operation, RecordedSample, Session
from .recorded_images import (
    RecordedImage,
    prompt_layout,
    recorded_images_open,
    recorded_images_seal,
)
from .request_images import payload_open

log = logging.getLogger(__name__)

__all__ = [
    "Recorded",
    "recording_fields",
    "recording_insert",
    "recording_write_cte",
    "recordings_end_session",
    "recordings_expire",
    "recordings_quota_check",
    "recordings_read",
    "recordings_touch",
    "records",
]

_COLUMNS = (
    "id",
    "tenant",
    "session",
    "prompt",
    "images",
    "tokens",
    "logprobs",
    "lengths",
    "size_bytes",
    "expiries",
)


@dataclass(frozen=True)
class Recorded:
    """One recorded sequence: its request's prompt (``IMAGE_POSITION`` where an image is), its
    sampled tokens and their logprobs, and the prompt's images."""

    prompt: np.ndarray  # int32
    tokens: np.ndarray  # int32
    logprobs: np.ndarray  # float32
    images: tuple[RecordedImage, ...] = field(default=())


def records(op: Operation) -> bool:
    """Whether ``op`` is a sample whose sequences are recorded when it completes."""
    return op.kind == Operation.Kind.SAMPLE and bool(
        (op.payload or {}).get("record_stability_info")
    )


def _lifetime() -> timedelta:
    return timedelta(seconds=settings.RECORDED_SEQUENCE_SECONDS)


def recording_fields(op: Operation, result: dict, now: datetime) -> dict | None:
    """The ``RecordedSample`` row of ``op``'s ``result`` (``records(op)`` must hold); None when
    its prompt's images cannot be sealed (the key is not Enabled, or KMS failed): then the
    sample completes unrecorded, and citing it is refused as citing any unrecorded sequence."""
    sealed = b""
    try:
        prompt, images = prompt_layout(payload_open(op)["prompt"]["chunks"])
    except (DomainError, KmsError) as exc:
        log.warning("recording %s not kept: its images could not be opened: %s", op.pk, exc)
        return None
    if images:
        try:
            sealed = recorded_images_seal(
                tenant=op.tenant,
                key_arn=op.session.platform.get("kms_key_arn"),
                recording_id=op.pk,
                images=images,
            )
        except (DomainError, KmsError) as exc:
            log.warning("recording %s not kept: its images could not be sealed: %s", op.pk, exc)
            return None
    sequences = result.get("sequences") or []
    tokens = [t for s in sequences for t in s["tokens"]]
    logprobs = [lp for s in sequences for lp in (s.get("logprobs") or [0.0] * len(s["tokens"]))]
    fields = {
        "id": op.pk,
        "tenant_id": op.tenant_id,
        "session_id": op.session_id,
        "prompt": np.asarray(prompt, "<i4").tobytes(),
        "images": sealed,
        "tokens": np.asarray(tokens, "<i4").tobytes(),
        "logprobs": np.asarray(logprobs, "<f4").tobytes(),
        "lengths": [len(s["tokens"]) for s in sequences],
        "created_at": now,
        "expiries": [(now + _lifetime()).timestamp()] * len(sequences),
        "expires_at": now + _lifetime(),
    }
    fields["size_bytes"] = sum(
        len(fields[name]) for name in ("prompt", "images", "tokens", "logprobs")
    )
    return fields


def recording_insert(op: Operation, result: dict, now: datetime) -> None:
    """Record ``op``'s sequences (inside the transaction that completes it); a second completion
    of the same operation records nothing more."""
    fields = recording_fields(op, result, now)
    if fields is None:
        return
    RecordedSample.objects.get_or_create(id=fields.pop("id"), defaults=fields)


def recording_write_cte(
    op: Operation, result: dict, now: datetime, *, gate: str
) -> tuple[str, list] | None:
    """What ``recording_insert`` does, as a common table expression of one PostgreSQL statement
    that inserts the row only if the expression named ``gate`` returned one (None: nothing to
    insert)."""
    fields = recording_fields(op, result, now)
    if fields is None:
        return None
    table = connection.ops.quote_name(RecordedSample._meta.db_table)
    names = (*_COLUMNS, "created_at", "expires_at")
    model_fields = [RecordedSample._meta.get_field(n) for n in names]
    columns = ", ".join(connection.ops.quote_name(f.column) for f in model_fields)
    params = [
        f.get_db_prep_save(fields[f.attname if f.attname in fields else f.name], connection)
        for f in model_fields
    ]
    sql = f"""
        recording_new AS (
            INSERT INTO {table} ({columns})
            SELECT {", ".join(["%s"] * len(names))} WHERE EXISTS (SELECT 1 FROM {gate})
            ON CONFLICT (id) DO NOTHING
        )"""  # noqa: S608 — identifiers from the model's metadata and the caller's CTE name, every value a bound parameter
    return sql, params


def recordings_quota_check(*, tenant: Tenant, now: datetime | None = None) -> None:
    """Refuse a recorded sample while the tenant's live recordings hold its ``recorded_bytes``
    quota or more (429 naming the limit); recorded samples in flight are not counted."""
    limit = limits_for(tenant).recorded_bytes
    now = now or timezone.now()
    held = (
        RecordedSample.objects.filter(tenant=tenant, expires_at__gt=now).aggregate(
            b=Sum("size_bytes")
        )["b"]
        or 0
    )
    if held >= limit:
        raise QuotaExceeded(
            f"account {tenant.account_id} keeps {held} bytes of recorded sampled sequences, its "
            f"limit of {limit} bytes (recorded_bytes); recordings go when their session ends or "
            f"{settings.RECORDED_SEQUENCE_SECONDS} seconds after their last use",
            field="record_stability_info",
        )


def _parsed(sequence_ids: set[str]) -> dict[str, set[int]]:
    """``{request id: {sequence index}}`` of well-formed ids (``<request_id>:<i>``)."""
    wanted: dict[str, set[int]] = {}
    for sequence_id in sequence_ids:
        request_id, sep, index = sequence_id.rpartition(":")
        if sep and index.isdigit() and len(index) < 6:
            wanted.setdefault(request_id, set()).add(int(index))
    return wanted


def recordings_read(
    *, tenant: Tenant, session_id: str, sequence_ids: set[str], now: datetime, field: str
) -> dict[str, Recorded]:
    """The live recorded sequences of ``session_id`` among ``sequence_ids``; an id that is
    another session's, unrecorded, expired or malformed is simply absent. A recording whose
    sealed images its key no longer opens is a 400 naming ``field``."""
    wanted = _parsed(sequence_ids)
    rows = RecordedSample.objects.filter(
        tenant=tenant, session_id=session_id, id__in=list(wanted), expires_at__gt=now
    ).only("id", "prompt", "images", "tokens", "logprobs", "lengths", "expiries")
    found: dict[str, Recorded] = {}
    for row in rows:
        images = recorded_images_open(
            tenant=tenant, recording_id=row.id, sealed=bytes(row.images), field=field
        )
        prompt = np.frombuffer(bytes(row.prompt), "<i4")
        tokens = np.frombuffer(bytes(row.tokens), "<i4")
        logprobs = np.frombuffer(bytes(row.logprobs), "<f4")
        starts = np.concatenate([[0], np.cumsum(row.lengths)]).astype(int)
        for i in wanted[row.id]:
            if i < len(row.lengths) and row.expiries[i] > now.timestamp():
                cut = slice(starts[i], starts[i + 1])
                found[f"{row.id}:{i}"] = Recorded(prompt, tokens[cut], logprobs[cut], images)
    return found


def recordings_touch(*, tenant: Tenant, sequence_ids: set[str], now: datetime) -> None:
    """Cited now: ``sequence_ids`` stay citable for another day from ``now``."""
    wanted = _parsed(sequence_ids)
    until = (now + _lifetime()).timestamp()
    with transaction.atomic():
        rows = list(
            RecordedSample.objects.select_for_update()
            .filter(tenant=tenant, id__in=sorted(wanted))
            .order_by("id")  # one lock order: concurrent requests never deadlock
            .only("id", "expiries")
        )
        for row in rows:
            for i in wanted[row.id]:
                if i < len(row.expiries):
                    row.expiries[i] = max(row.expiries[i], until)
            row.expires_at = datetime.fromtimestamp(max(row.expiries), tz=UTC)
        RecordedSample.objects.bulk_update(rows, ["expiries", "expires_at"])


def recordings_end_session(session_id: str) -> int:
    """The session ended: its recordings go (its queued training requests carry what they cite
    in their payloads). Returns how many were deleted."""
    deleted, _ = RecordedSample.objects.filter(session_id=session_id).delete()
    return deleted


def recordings_expire(*, now: datetime | None = None) -> int:
    """Delete recordings past their time, and those of sessions that ended (a recorded sample
    that completed after its session stopped); the janitor's. Returns how many."""
    gone = Q(expires_at__lte=now or timezone.now()) | Q(session__state__in=Session.ENDED_STATES)
    deleted, _ = RecordedSample.objects.filter(gone).delete()
    return deleted
