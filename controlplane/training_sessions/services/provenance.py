"""Provenance spans of a forward or forward_backward request, checked against the recorded
sequences of the model's session, and what ``stable_reinforce`` takes from those recordings.

Every datum's spans cite recorded sequences of the same session (another session's, another
tenant's, an unrecorded or an expired id: the same 404, naming the span); each run lies inside
the recorded prompt or sampled tokens it names; ``model_input`` tokens equal the recorded ones,
and so do targets under a sampled run (targets under a prompt run are not checked: recipes pad
them). Citing a recording keeps it for another day. For ``stable_reinforce`` (which needs
provenance on every datum) the request's operation stores, beside the client's request, per
datum the recorded sampling logprobs where a target was sampled (the client's own value
elsewhere) and the mask of those positions: the ``recorded`` part of its payload, which the
worker hands the loss as ``loss_fn_inputs`` ``logprobs`` and ``sampled_mask``, and which a
replay after a failover reads back as it was.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from django.utils import timezone

from controlplane.errors import DomainError, NotFound
from controlplane.tenants.models import Tenant

from ..models import TrainingModel
from .recordings import Recorded, recordings_read, recordings_touch

__all__ = ["RECORDED_KEY", "provenance_resolve"]

RECORDED_KEY = "recorded"
"""The payload key of what a request took from the recordings (not part of what a retry repeats)."""

NEEDS_PROVENANCE = frozenset({"stable_reinforce"})
MAX_CITED = 4096
"""Most distinct sequences one request may cite (the SDKs send at most 1,024 datums)."""


class UnknownSequence(NotFound):
    code = "sequence_not_found"


@dataclass
class _Datum:
    at: str  # "forward_backward_input.data[3]"
    raw: dict  # as the request carries it
    tokens: np.ndarray
    targets: np.ndarray
    model_input_spans: list[dict]
    loss_fn_input_spans: list[dict]


def provenance_resolve(*, tenant: Tenant, model_id: object, kind: str, payload: dict) -> dict:
    """``payload`` (a forward or forward_backward request as validated), its spans checked; for
    ``stable_reinforce``, with its ``recorded`` part added. Unchanged when no datum carries
    provenance and the loss needs none."""
    key = "forward_input" if kind == "forward" else "forward_backward_input"
    batch = payload.get(key)
    if not isinstance(batch, dict):
        return payload
    loss_fn, data = batch.get("loss_fn"), batch.get("data") or []
    cited = [i for i, d in enumerate(data) if d.get("model_input_spans") is not None]
    if loss_fn in NEEDS_PROVENANCE and len(cited) < len(data):
        missing = next(i for i, d in enumerate(data) if d.get("model_input_spans") is None)
        raise DomainError(
            f"{key}.data[{missing}] has no provenance: {loss_fn} needs provenance on every "
            "datum, naming the recorded sequences its tokens were sampled from (sample with "
            "record_stability_info=True, then Datum.with_provenance)",
            field=f"{key}.data[{missing}]",
        )
    if not cited:
        return payload
    session_id = (
        TrainingModel.objects.filter(tenant=tenant, id=model_id)
        .values_list("session_id", flat=True)
        .first()
    )
    if session_id is None:
        return payload  # the submit answers 404 for the model itself
    now = timezone.now()
    datums = [_datum(f"{key}.data[{i}]", data[i]) for i in cited]
    ids = {s["sequence_id"] for d in datums for s in (*d.model_input_spans, *d.loss_fn_input_spans)}
    if len(ids) > MAX_CITED:
        raise DomainError(
            f"{key}.data: the datums cite {len(ids)} sequences; at most {MAX_CITED} per request",
            field=f"{key}.data",
        )
    found = recordings_read(tenant=tenant, session_id=session_id, sequence_ids=ids, now=now)
    recorded = []
    for datum in datums:
        _check_inputs(datum, found)
        recorded.append(_check_targets(datum, found))
    recordings_touch(tenant=tenant, sequence_ids=ids, now=now)
    if loss_fn not in NEEDS_PROVENANCE:
        return payload
    return {**payload, RECORDED_KEY: {"datums": recorded}}


def _datum(at: str, datum: dict) -> _Datum:
    tokens = [t for chunk in datum["model_input"]["chunks"] for t in chunk["tokens"]]
    targets = datum["loss_fn_inputs"]["target_tokens"]["data"]
    return _Datum(
        at,
        datum,
        np.asarray(tokens, np.int64),
        np.asarray(targets, np.int64),
        datum["model_input_spans"],
        datum["loss_fn_input_spans"],
    )


def _recorded(found: dict[str, Recorded], span: dict, where: str) -> Recorded:
    rec = found.get(span["sequence_id"])
    if rec is None:
        # another session's, another tenant's, unrecorded, expired or never issued: one answer
        raise UnknownSequence(
            f"{where}: sequence {span['sequence_id']!r} is not a recorded sequence of this "
            "session (sampled with record_stability_info=True and cited within a day)",
            field=f"{where}.sequence_id",
        )
    return rec


def _run(rec: Recorded, span: dict, where: str) -> np.ndarray:
    """The recorded tokens the span names, refused if it runs past them."""
    source, what = (
        (rec.prompt, "prompt")
        if span["type"] == "prompt_tokens"
        else (rec.tokens, "sampled tokens")
    )
    offset, length = span["offset"], span["length"]
    if offset + length > len(source):
        raise DomainError(
            f"{where}: offset {offset} + length {length} runs past the recorded {what} of "
            f"sequence {span['sequence_id']!r} ({len(source)} tokens)",
            field=where,
        )
    return source[offset : offset + length]


def _mismatch(sent: np.ndarray, recorded: np.ndarray, start: int) -> str | None:
    differs = np.flatnonzero(sent != recorded)
    if not differs.size:
        return None
    k = int(differs[0])
    return f"position {start + k}: {int(sent[k])} sent, {int(recorded[k])} recorded"


def _check_inputs(datum: _Datum, found: dict[str, Recorded]) -> None:
    position = 0
    for j, span in enumerate(datum.model_input_spans):
        where = f"{datum.at}.model_input_spans[{j}]"
        run = _run(_recorded(found, span, where), span, where)
        sent = datum.tokens[position : position + len(run)]
        if (bad := _mismatch(sent, run, position)) is not None:
            raise DomainError(
                f"{where}: model_input differs from what sequence {span['sequence_id']!r} "
                f"recorded ({bad})",
                field=where,
            )
        position += len(run)


def _check_targets(datum: _Datum, found: dict[str, Recorded]) -> dict:
    """Targets under sampled runs checked; the datum's recorded logprobs and sampled mask."""
    given = datum.raw["loss_fn_inputs"].get("logprobs")
    logprobs = (
        np.asarray(given["data"], np.float32)
        if given is not None and len(given["data"]) == len(datum.targets)
        else np.zeros(len(datum.targets), np.float32)
    )
    mask = np.zeros(len(datum.targets), np.float32)
    position = 0
    for j, span in enumerate(datum.loss_fn_input_spans):
        where = f"{datum.at}.loss_fn_input_spans[{j}]"
        rec = _recorded(found, span, where)
        run = _run(rec, span, where)
        end = position + len(run)
        if span["type"] == "sampled_tokens":
            if (bad := _mismatch(datum.targets[position:end], run, position)) is not None:
                raise DomainError(
                    f"{where}: target_tokens differ from the tokens sequence "
                    f"{span['sequence_id']!r} sampled ({bad})",
                    field=where,
                )
            logprobs[position:end] = rec.logprobs[span["offset"] : span["offset"] + len(run)]
            mask[position:end] = 1.0
        position = end
    return {"logprobs": logprobs.tolist(), "sampled_mask": mask.tolist()}
