"""Operations' wire JSON into engine calls on a host, and their outcomes back.

A pass of the worker (``passes.py``) hands over what it claimed: ``run_packed`` runs several
sessions' operations of one packed kind (``PACKED_CALLS``: forward, forward_backward,
optim_step) in one engine call, ``run_samples`` every claimed sample request of any adapters in
one ``sample_many`` call, and ``run_training`` one operation of any training kind alone (create,
save, load, unload; recovery replays a model's steps through it). Each item gets the ``Outcome``
it would have had alone: a bad request fails by itself, and a failure of a shared sampling,
forward or forward_backward call runs its requests again one by one. Engine errors that mean bad input are
``user`` errors; anything else is a ``server`` error; ``NotNow`` puts an operation back.
Checkpoints pass through a ``Vault``: sealed in scratch and uploaded with a manifest; fetched,
verified and opened into scratch on the way back. No Django, no Celery.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from controlplane.storage import as_uri, location
from loopwright.types import (
    AdamParams,
    DimuonParams,
    ForwardBackwardInput,
    ModelInput,
    OptimParams,
    SamplingParams,
)

from . import checkpoint_storage as stored
from .engine import checkpoints
from .engine.adapters import AdapterConfig
from .engine.errors import EngineError
from .engine.interface import Engine
from .engine.sampler import SAMPLE_OPTIONS, SampleJob, TokenSink
from .sealing import Vault


@dataclass
class Outcome:
    """What became of one operation: a result, or an error with its category."""

    result: dict | None = None
    error: str | None = None
    category: str = "server"
    # not run now, for a passing reason: pending again (``home``: on its model's worker now)
    retry: bool = False
    home: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None


class NotNow(Exception):
    """The operation cannot run on this worker yet, for a passing reason (its replica group is
    not ready): it is put back, not failed."""


def classify(exc: BaseException) -> Outcome:
    if isinstance(exc, NotNow):
        return Outcome(error=str(exc), retry=True)
    if isinstance(exc, EngineError):
        return Outcome(error=str(exc), category=exc.category)
    return Outcome(error=f"{type(exc).__name__}: {exc}", category="server")


def run_training(
    host: Engine, kind: str, payload: dict, plan: dict, vault: Vault | None = None
) -> dict:
    """One operation of a training model, by kind; ``vault`` seals and opens its checkpoints."""
    adapter = plan["adapter"]
    if kind == "create_model":
        if host.has_adapter(adapter):  # created before its completion could be recorded
            host.remove_adapter(adapter)
        lora = plan["lora"]
        cfg = AdapterConfig(
            rank=int(lora["rank"]),
            alpha=float(lora["alpha"]),
            seed=lora.get("seed"),
            train_attn=bool(lora.get("train_attn", True)),
            train_mlp=bool(lora.get("train_mlp", True)),
            train_unembed=bool(lora.get("train_unembed", True)),
            train_projector=bool(lora.get("train_projector", False)),
            optimizer=str(lora.get("optimizer", "adamw")),
        )
        host.create_adapter(adapter, cfg)
        if "load" not in plan:
            return {"model_id": adapter}
        kind = "load_weights"  # a model made by load_weights: the checkpoint goes in at once
    if kind == "forward":
        out = host.forward(adapter, engine_batch(payload, "forward_input"))
        return out.model_dump(mode="json")
    if kind == "forward_backward":
        fwd = engine_batch(payload, "forward_backward_input")
        return host.forward_backward(adapter, fwd).model_dump(mode="json")
    if kind == "optim_step":
        return host.optim_step(adapter, optim_params(payload)).model_dump(mode="json")
    if kind in ("save_weights", "save_weights_for_sampler"):
        # taken without pending gradients, a state save is also where a failover resumes
        pending = host.has_pending_gradients(adapter)
        return {**_save(host, kind, adapter, plan, vault), "_pending_gradients": pending}
    if kind == "load_weights":
        load = plan["load"]
        optimizer = bool(load["optimizer"])
        skip = () if optimizer else (checkpoints.OPTIMIZER_FILE,)
        with opened(load, vault, skip) as folder:  # verified and opened before the model changes
            host.load_state(adapter, folder, optimizer=optimizer)
        return {"path": load["tinker_path"], "model_id": adapter, "type": "load_weights"}
    if kind == "unload_model":
        if host.has_adapter(adapter):
            host.remove_adapter(adapter)
        return {"model_id": adapter, "type": "unload_model"}
    raise ValueError(f"unknown operation kind {kind!r}")


def engine_batch(payload: dict, key: str) -> ForwardBackwardInput:
    """The batch an operation's payload gives the engine: the request's, each datum's
    ``loss_fn_inputs`` completed with what the service took for it from the recorded sequences
    it cites (the payload's ``recorded`` part: ``logprobs`` and ``sampled_mask``), if any."""
    batch = payload[key]
    recorded = payload.get("recorded")
    if recorded:
        data = [
            {
                **datum,
                "loss_fn_inputs": {
                    **datum["loss_fn_inputs"],
                    **{
                        name: {"data": values, "dtype": "float32", "shape": [len(values)]}
                        for name, values in taken.items()
                    },
                },
            }
            for datum, taken in zip(batch["data"], recorded["datums"], strict=True)
        ]
        batch = {**batch, "data": data}
    return ForwardBackwardInput.model_validate(batch)


def optim_params(payload: dict) -> OptimParams:
    """An optim_step's hyperparameters: ``adam_params`` (AdamW) or ``optimizer_params``
    (Dimuon), as the request sent them."""
    if payload.get("optimizer_params") is not None:
        return DimuonParams.model_validate(payload["optimizer_params"])
    return AdamParams.model_validate(payload["adam_params"])


def _save(host: Engine, kind: str, adapter: str, plan: dict, vault: Vault | None) -> dict:
    spec = plan["checkpoint"]
    training = kind == "save_weights"
    storage, merged = Path(spec["storage_path"]), Path(spec["storage_path"] + ".merged")
    result: dict = {"type": kind}
    sealing = spec.get("sealing")
    if sealing is None:  # planned before checkpoints were sealed
        host.save_state(adapter, storage, optimizer=training)
        if spec.get("merge"):
            result["_merged_path"] = str(host.export_merged(adapter, merged))
    else:
        result.update(_save_sealed(host, adapter, spec, training, _need(vault)))
    if plan.get("sampler_id"):
        result.update(path=None, sampling_session_id=plan["sampler_id"])
    else:
        result["path"] = spec["tinker_path"]
    return result


def _save_sealed(host: Engine, adapter: str, spec: dict, training: bool, vault: Vault) -> dict:
    """Save into scratch, seal everything there, then upload: the checkpoint, then its merge."""
    sealing, resource = spec["sealing"], spec["tinker_path"]
    uri = spec.get("storage_uri") or as_uri(spec["storage_path"])
    vault.usable_key(sealing, f"saving {resource}")  # refuse before any work
    with vault.scratch() as scratch:
        host.save_state(adapter, scratch / "state", optimizer=training)
        size = vault.seal_folder(scratch / "state", scratch / "sealed", sealing)
        if spec.get("merge"):
            host.export_merged(adapter, scratch / "merged")
            vault.seal_folder(
                scratch / "merged", scratch / "sealed-merged", sealing, prefix="merged/"
            )
        result = {
            "_plaintext_bytes": size,
            "_manifest": stored.upload(vault, scratch / "sealed", uri, resource),
        }
        if spec.get("merge"):
            merged_uri = uri + ".merged"
            result["_merged_manifest"] = stored.upload(
                vault, scratch / "sealed-merged", merged_uri, resource
            )
            result["_merged_path"] = location(merged_uri)
    return result


@contextmanager
def opened(spec: dict, vault: Vault | None, skip: tuple[str, ...] = ()) -> Iterator[Path]:
    """A checkpoint folder the engine can read: fetched, verified and opened into scratch.

    ``spec`` holds ``storage_uri``, ``manifest`` and ``sealing``; checkpoints saved before
    manifests were kept are read from their local ``storage_path``.
    """
    sealing, manifest = spec.get("sealing"), spec.get("manifest")
    if sealing is None:  # saved before checkpoints were sealed
        yield Path(spec["storage_path"])
        return
    if manifest is None:  # sealed, saved before storage kept manifests: a local folder
        with _need(vault).opened(Path(spec["storage_path"]), sealing, skip=skip) as plain:
            yield plain
        return
    with stored.fetched(_need(vault), spec["storage_uri"], manifest, sealing, skip=skip) as plain:
        yield plain


def _need(vault: Vault | None) -> Vault:
    if vault is None:
        raise RuntimeError("this checkpoint is sealed, and the worker was given no KMS vault")
    return vault


def sample_job(payload: dict) -> SampleJob:
    """The engine's job for a sample payload (``SampleRequest`` JSON, plus ``topk_logprobs``)."""
    model_input = ModelInput.model_validate(payload["prompt"])
    text = all(chunk.type == "encoded_text" for chunk in model_input.chunks)
    return SampleJob.from_wire(
        model_input.to_ints() if text else [],
        int(payload.get("num_samples", 1)),
        SamplingParams.model_validate(payload["sampling_params"]),
        None if text else model_input,  # images: the engine's sampler expands them
        **{key: payload[key] for key in SAMPLE_OPTIONS if payload.get(key) is not None},
    )


class SamplerAdapters:
    """Adapters loaded from saved sampler weights, least recently used first.

    An RL loop saves new sampler weights every step; only the newest few stay on the host, the
    rest are dropped (and reloaded from storage if a client samples from them again).
    """

    def __init__(self, limit: int = 8) -> None:
        self.limit = limit
        self._order: OrderedDict[str, None] = OrderedDict()

    def ensure(self, host: Engine, adapter: str, spec: dict, vault: Vault | None = None) -> None:
        """Load ``adapter`` from the saved weights ``spec`` describes, unless it is loaded."""
        if not host.has_adapter(adapter):
            with opened(spec, vault, (checkpoints.OPTIMIZER_FILE,)) as folder:
                host.load_adapter_from(adapter, folder)
        self._order[adapter] = None
        self._order.move_to_end(adapter)

    def trim(self, host: Engine) -> list[str]:
        dropped = []
        while len(self._order) > self.limit:
            adapter, _ = self._order.popitem(last=False)
            if host.has_adapter(adapter):
                host.remove_adapter(adapter)
            dropped.append(adapter)
        return dropped


PACKED_CALLS = {
    "forward": "forward_many",
    "forward_backward": "forward_backward_many",
    "optim_step": "optim_step_many",
}
"""The engine call that runs many sessions' operations of each packed training kind at once."""

# a failure of the whole call (not one request's): its operations run again one by one, so the
# one at fault fails alone. Not optim_step: there each entry's error is already its own, and a
# step that failed half-way must not be applied again.
_RETRIED_ALONE = frozenset({"forward", "forward_backward"})


def run_packed(host: Engine, kind: str, items: Sequence[tuple[dict, dict]]) -> list[Outcome]:
    """Operations of one packed kind (``PACKED_CALLS``), each (payload, plan) of another
    session, in one engine call; each gets the outcome it would have had alone."""
    outcomes: list[Outcome | None] = [None] * len(items)
    requests: list[tuple[int, tuple]] = []
    for i, (payload, plan) in enumerate(items):
        try:
            requests.append((i, _packed_request(kind, payload, plan)))
        except Exception as exc:  # a payload the wire types refuse
            outcomes[i] = classify(exc)
    ran = _engine_call(host, kind, [request for _, request in requests])
    for (i, _), res in zip(requests, ran, strict=True):
        outcomes[i] = res
    if kind in _RETRIED_ALONE and len(requests) > 1:
        for i, request in requests:
            if _shared_failure(outcomes[i]):
                (outcomes[i],) = _engine_call(host, kind, [request])
    return [o if o is not None else Outcome(error="not run") for o in outcomes]


def _packed_request(kind: str, payload: dict, plan: dict) -> tuple:
    adapter = plan["adapter"]
    if kind == "forward":
        return adapter, engine_batch(payload, "forward_input")
    if kind == "forward_backward":
        return adapter, engine_batch(payload, "forward_backward_input")
    if kind == "optim_step":
        return adapter, optim_params(payload)
    raise ValueError(f"operation kind {kind!r} does not pack")


def _engine_call(host: Engine, kind: str, requests: list[tuple]) -> list[Outcome]:
    if not requests:
        return []
    try:
        results = getattr(host, PACKED_CALLS[kind])(requests)
    except Exception as exc:
        return [classify(exc)] * len(requests)
    return [
        classify(r) if isinstance(r, Exception) else Outcome(result=r.model_dump(mode="json"))
        for r in results
    ]


def _shared_failure(outcome: Outcome | None) -> bool:
    return (
        outcome is not None
        and not outcome.ok
        and not outcome.retry
        and outcome.category == "server"
    )


def run_samples(
    host: Engine,
    items: Sequence[tuple[dict, dict]],
    samplers: SamplerAdapters | None = None,
    vaults: Sequence[Vault | None] | None = None,
    on_tokens: TokenSink | None = None,
) -> list[Outcome]:
    """Sample requests (payload, plan) of any adapters (a training model's live weights, saved
    sampler weights, the base model) in one engine call.

    ``vaults[i]`` opens the saved weights item ``i`` samples from, if they are sealed. A bad
    request fails alone; the others still run, and a failure of the shared call (not one
    request's) runs its requests again one by one. ``on_tokens`` hears the tokens as they are
    drawn, ``job`` being the item's index (a request run again may repeat some: each carries
    its position).
    """
    samplers = samplers or SamplerAdapters(limit=1 << 30)
    outcomes: list[Outcome | None] = [None] * len(items)
    requests: list[tuple[int, str | None, SampleJob]] = []
    for i, (payload, plan) in enumerate(items):
        try:
            adapter = _sampler_adapter(host, plan, samplers, vaults[i] if vaults else None)
            job = sample_job(payload)
            host.sampler.validate(job)
        except Exception as exc:
            outcomes[i] = classify(exc)
            continue
        requests.append((i, adapter, job))
    for (i, _, _), outcome in zip(requests, _sample_call(host, requests, on_tokens), strict=True):
        outcomes[i] = outcome
    if len(requests) > 1:
        for request in requests:
            if _shared_failure(outcomes[request[0]]):
                (outcomes[request[0]],) = _sample_call(host, [request], on_tokens)
    samplers.trim(host)  # after the batch: never drop an adapter this batch is using
    return [o if o is not None else Outcome(error="not run") for o in outcomes]


def _sample_call(
    host: Engine,
    requests: list[tuple[int, str | None, SampleJob]],
    on_tokens: TokenSink | None = None,
) -> list:
    if not requests:
        return []
    items_of = [i for i, _, _ in requests]  # one job per request: the call's job k is its item
    sink = on_tokens and (
        lambda tokens: on_tokens([t._replace(job=items_of[t.job]) for t in tokens])
    )
    try:
        results = host.sample_many([(adapter, [job]) for _, adapter, job in requests], sink)
    except Exception as exc:
        return [classify(exc)] * len(requests)
    return [
        classify(r) if isinstance(r, Exception) else Outcome(result=r[0].to_wire()) for r in results
    ]


def _sampler_adapter(
    host: Engine, plan: dict, samplers: SamplerAdapters, vault: Vault | None
) -> str | None:
    """The adapter to sample with; saved sampler weights are loaded on first use."""
    adapter = plan.get("adapter")
    if adapter is not None and plan.get("storage_path"):
        samplers.ensure(host, adapter, plan, vault)
    return adapter
