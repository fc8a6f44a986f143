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

from dataclasses import dataclass, replace

import numpy as np
from django.utils import timezone

from controlplane.errors import DomainError, NotFound
from controlplane.tenants.models import Tenant

from ..models import TrainingModel
from . import images as image_checks
from .recorded_images import RecordedImage, image_digest, is_image
from .recordings import Recorded, recordings_read, recordings_touch

__all__ = ["RECORDED_KEY", "provenance_resolve"]

RECORDED_KEY = "recorded"
"""The payload key of what a request took from the recordings (not part of what a retry repeats)."""

NEEDS_PROVENANCE = frozenset({"stable_reinforce"})
MAX_CITED = 4096
"""Most distinct sequences one request may cite (the SDKs send at most 1,024 datums)."""
_IMAGE_STRIDE = 1 << 24
"""Image positions compare as ``-(image id * stride + position in the image + 1)``: equal
exactly when the same image's same position (an image takes far fewer positions)."""


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
    owner = (
        TrainingModel.objects.filter(tenant=tenant, id=model_id)
        .values_list("session_id", "base_model")
        .first()
    )
    if owner is None:
        return payload  # the submit answers 404 for the model itself
    session_id, base_model = owner
    # images checked (and their token counts written in) before their positions are counted
    image_checks.images_check(
        base_model=base_model,
        inputs=((f"{key}.data[{i}].model_input", data[i]["model_input"]) for i in cited),
    )
    now = timezone.now()
    ids: dict[bytes, int] = {}  # image digest → the id its positions compare by
    datums = [_datum(f"{key}.data[{i}]", data[i], ids) for i in cited]
    sequences = {
        s["sequence_id"] for d in datums for s in (*d.model_input_spans, *d.loss_fn_input_spans)
    }
    if len(sequences) > MAX_CITED:
        raise DomainError(
            f"{key}.data: the datums cite {len(sequences)} sequences; at most {MAX_CITED} per "
            "request",
            field=f"{key}.data",
        )
    found = _with_image_ids(
        recordings_read(
            tenant=tenant,
            session_id=session_id,
            sequence_ids=sequences,
            now=now,
            field=f"{key}.data",
        ),
        ids,
    )
    recorded = []
    for datum in datums:
        _check_inputs(datum, found)
        recorded.append(_check_targets(datum, found))
    recordings_touch(tenant=tenant, sequence_ids=sequences, now=now)
    if loss_fn not in NEEDS_PROVENANCE:
        return payload
    return {**payload, RECORDED_KEY: {"datums": recorded}}


def _image_run(image_id: int, length: int) -> np.ndarray:
    return -(image_id * _IMAGE_STRIDE + np.arange(length, dtype=np.int64) + 1)


def _image_id(ids: dict[bytes, int], digest: bytes) -> int:
    return ids.setdefault(digest, len(ids) + 1)


def _positions(chunks: list[dict], ids: dict[bytes, int]) -> np.ndarray:
    """A model input's positions: token ids, and each image's positions by its id."""
    runs = [
        _image_run(_image_id(ids, image_digest(c)), int(c.get("expected_tokens") or 0))
        if is_image(c)
        else np.asarray(c["tokens"], np.int64)
        for c in chunks
    ]
    return np.concatenate(runs) if runs else np.zeros(0, np.int64)


def _prompt_positions(
    prompt: np.ndarray, images: tuple[RecordedImage, ...], ids: dict[bytes, int]
) -> np.ndarray:
    positions = prompt.astype(np.int64)
    for image in images:
        run = _image_run(_image_id(ids, image.digest), image.length)
        positions[image.offset : image.offset + image.length] = run
    return positions


def _with_image_ids(found: dict[str, Recorded], ids: dict[bytes, int]) -> dict[str, Recorded]:
    """The recordings, their prompts' image positions by the ids the datums' images took."""
    prompts: dict[int, np.ndarray] = {}  # one per recording (its sequences share the array)
    out = {}
    for sequence_id, rec in found.items():
        if not rec.images:
            out[sequence_id] = rec
            continue
        if id(rec.prompt) not in prompts:
            prompts[id(rec.prompt)] = _prompt_positions(rec.prompt, rec.images, ids)
        out[sequence_id] = replace(rec, prompt=prompts[id(rec.prompt)])
    return out


def _datum(at: str, datum: dict, ids: dict[bytes, int]) -> _Datum:
    tokens = _positions(datum["model_input"]["chunks"], ids)
    targets = datum["loss_fn_inputs"]["target_tokens"]["data"]
    return _Datum(
        at,
        datum,
        tokens,
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
    a, b = int(sent[k]), int(recorded[k])
    if a < 0 and b < 0:
        return f"position {start + k}: the image sent is not the recorded image"
    return f"position {start + k}: {_what(a)} sent, {_what(b)} recorded"


def _what(position: int) -> str:
    return "an image" if position < 0 else str(position)


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
