"""The model host: one frozen base model, many sessions' LoRA adapters, every engine operation.

A host is used by one worker process; calls are serialised by a lock. Inputs are the SDK's wire
types; outputs too. Every operation validates its whole input before it touches the model, so a
rejected request leaves the session exactly as it was. After each operation, heap memory it freed
goes back to the OS once the process has grown by ``release_slack_mb`` (see ``memory``).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import torch
from peft import PeftModel
from transformers import (
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.utils import logging as hf_logging

from loopwright.types import (
    ForwardBackwardInput,
    ForwardBackwardOutput,
    OptimParams,
    OptimStepResponse,
)

from . import checkpoints, memory, optimizer_steps, snapshots
from .adapters import AdapterConfig, AdapterPool
from .catalog import MaterializedModel, ModelCatalog, default_catalog
from .errors import CheckpointError, EngineError
from .mixed_pass import MixedPass, PassRequest
from .optim import AdamState
from .sampler import SampleJob, Sampler, SampleResult, TokenSink
from .vision import Pixels, VisionInputs, image_token_id_of, pixels_to

_T = TypeVar("_T")


@dataclass(frozen=True, kw_only=True)
class HostConfig:
    """How a host loads its base model and how much it holds."""

    device: str = "cpu"
    # Where the base is loaded when that is not ``device``: "cpu" for a base that only fits the
    # accelerator once sharded (``distributed.shard_base`` then moves each rank's shards there).
    load_device: str | None = None
    dtype: str | None = None  # default: float32 on CPU, bfloat16 on an accelerator
    max_loaded_adapters: int = 16
    max_lora_rank: int = 128
    max_batch_tokens: int = 16384  # padded tokens per forward/backward micro-batch
    max_sample_rows: int = 256  # sequences decoded together
    max_sample_tokens: int = 65536  # padded KV-cache positions held while sampling
    spill_dir: Path | None = None
    # Resident growth over which freed heap is returned to the OS after an operation (0: always).
    release_slack_mb: int = 256

    def torch_dtype(self) -> torch.dtype:
        name = self.dtype or ("float32" if self.device == "cpu" else "bfloat16")
        return getattr(torch, name)


class ModelHost:
    """One base model in memory and the LoRA adapters of the sessions placed on it."""

    def __init__(
        self, base_model: str, config: HostConfig | None = None, catalog: ModelCatalog | None = None
    ) -> None:
        self.config = config or HostConfig()
        self.catalog = catalog or default_catalog()
        self.materialized: MaterializedModel = self.catalog.materialize(base_model)
        self.base_model = base_model
        self.device = torch.device(self.config.device)
        self.dtype = self.config.torch_dtype()
        hf_logging.disable_progress_bar()
        started = time.perf_counter()
        model = self._load_base()
        model.to(self.config.load_device or self.device).requires_grad_(False)  # type: ignore[arg-type]  # transformers' .to stub
        self.tokenizer: PreTrainedTokenizerBase = AutoTokenizer.from_pretrained(
            self.materialized.path
        )
        self.load_seconds = time.perf_counter() - started
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.context_length = self.materialized.spec.context_length
        spill = self.config.spill_dir or (self.catalog.cache_dir / "spill" / f"host-{id(self):x}")
        self.pool = AdapterPool(
            model,
            max_loaded=self.config.max_loaded_adapters,
            max_rank=self.config.max_lora_rank,
            spill_dir=Path(spill),
        )
        self.sampler = Sampler(
            self.pool.model,
            self.tokenizer,
            self.vocab_size,
            self.context_length,
            self.device,
            router=self.pool.router,
            max_rows=self.config.max_sample_rows,
            max_tokens=self.config.max_sample_tokens,
        )
        self.passes = MixedPass(
            self.pool,
            self._target_logprobs,
            self.vocab_size,
            self.context_length,
            self.config.max_batch_tokens,
            self.device,
        )
        # A vision-language base reads images: its processor makes them image tokens and pixels.
        self.vision: VisionInputs | None = None
        if self.materialized.spec.vision:
            image_token = image_token_id_of(model.config)
            if image_token is None:
                raise EngineError(f"{base_model!r} is a vision model without an image token")
            self.vision = VisionInputs(self.materialized.path, self.vocab_size, image_token)
            self.passes.vision = self.sampler.vision = self.vision
        self._lock = threading.RLock()
        # Every pass is one of a group's in step (a base sharded over ranks): a failure that is
        # not a request's fails the whole call rather than going on to the next batch alone.
        self.ranks_in_step = False
        # engine calls by name (forward_many, forward_backward_many, optim_step_many,
        # sample_many): how many calls a worker's operations took
        self.calls: collections.Counter[str] = collections.Counter()
        self.memory = memory.HeapReleaser(self.config.release_slack_mb << 20)
        # told of each adapter spilled to disk to make room, with its whole state
        self.on_evict: Callable[[str, snapshots.Snapshot], None] | None = None
        self.pool.on_evict = self._evicted

    def _load_base(self) -> PreTrainedModel:
        """The base model from its folder: a causal LM, or an image-text-to-text model."""
        auto = (
            AutoModelForImageTextToText if self.materialized.spec.vision else AutoModelForCausalLM
        )
        return auto.from_pretrained(self.materialized.path, dtype=self.dtype)

    def _evicted(self, model_id: str, lora: AdapterConfig, spilled: dict) -> None:
        if self.on_evict is None:
            return
        self.on_evict(
            model_id,
            snapshots.Snapshot(
                base_model=self.base_model,
                lora=lora,
                adapter=snapshots.copied(spilled["weights"]),
                optimizer=AdamState.from_tensors(
                    spilled["optimizer_step"], snapshots.copied(spilled["optimizer"])
                ),
                gradients=snapshots.copied(spilled["grads"]),
                peft_config_json=self._peft_config_json(model_id),
            ),
        )

    @contextlib.contextmanager
    def _operation(self, *, release: bool = False) -> Iterator[None]:
        """One operation at a time; after it, freed heap goes back to the OS if the process grew
        past its slack (``release``: in any case, e.g. a whole adapter was just freed)."""
        with self._lock:
            try:
                yield
            finally:
                self.memory.settle(force=release)

    def exclusive(self) -> contextlib.AbstractContextManager[None]:
        """Hold the host across several calls (a data-parallel step: the pass, then the gradient
        exchange) so that no other thread's operation runs in between."""
        return self._operation()

    # -- adapters --------------------------------------------------------------------------
    def create_adapter(self, model_id: str, lora: AdapterConfig) -> None:
        with self._operation():
            self.pool.create(model_id, lora)

    def remove_adapter(self, model_id: str) -> None:
        with self._operation(release=True):
            self.pool.remove(model_id)

    def has_adapter(self, model_id: str) -> bool:
        return model_id in self.pool

    # -- training --------------------------------------------------------------------------
    def forward(self, model_id: str | None, fwd: ForwardBackwardInput) -> ForwardBackwardOutput:
        """Loss and per-token logprobs without gradients (``model_id=None``: the base model)."""
        return _one(self.forward_many([(model_id, fwd)]))

    def forward_backward(self, model_id: str, fwd: ForwardBackwardInput) -> ForwardBackwardOutput:
        """Accumulate gradients of the summed loss into the adapter until ``optim_step``."""
        return _one(self.forward_backward_many([(model_id, fwd)]))

    def datum_lengths(
        self, model_id: str | None, fwd: ForwardBackwardInput, *, backward: bool
    ) -> list[int]:
        """Check a forward (``backward=False``) or forward_backward request exactly as running
        it would, without running it; the token count of each datum."""
        with self._operation():
            job = self.passes.validate(PassRequest(model_id, fwd, backward=backward))
            return [d.length for d in job.datums]

    def forward_many(
        self, requests: Sequence[tuple[str | None, ForwardBackwardInput]]
    ) -> list[ForwardBackwardOutput | Exception]:
        """``forward`` for several sessions' requests in shared passes: each entry is what that
        request alone would return, or the error it alone would raise."""
        with self._operation():
            self.calls["forward_many"] += 1
            return self.passes.run([PassRequest(m, f, backward=False) for m, f in requests])

    def forward_backward_many(
        self, requests: Sequence[tuple[str, ForwardBackwardInput]]
    ) -> list[ForwardBackwardOutput | Exception]:
        """``forward_backward`` for several sessions' requests in shared passes; each adapter
        accumulates exactly the gradients its own requests would give it alone."""
        with self._operation():
            self.calls["forward_backward_many"] += 1
            return self.passes.run([PassRequest(m, f, backward=True) for m, f in requests])

    def optim_step(self, model_id: str, step: OptimParams) -> OptimStepResponse:
        return _one(self.optim_step_many([(model_id, step)]))

    def optim_step_many(
        self, requests: Sequence[tuple[str, OptimParams]]
    ) -> list[OptimStepResponse | Exception]:
        """An optimizer step for each (model, params) with the model's family (AdamW or Dimuon,
        whose params it must be given); each adapter's state is its own, and so is each entry's
        error (one adapter's failure never stops the others' steps)."""
        with self._operation():
            self.calls["optim_step_many"] += 1
            out: list[OptimStepResponse | Exception] = []
            for model_id, step in requests:
                try:
                    cfg = self.pool.config(model_id)
                    hp = optimizer_steps.hyper_for(cfg.optimizer, step)
                    params = self.pool.parameters(model_id)
                    state = self.pool.optimizer(model_id)
                    metrics = optimizer_steps.apply(hp, params, state, cfg.rank)
                    out.append(OptimStepResponse(metrics=metrics))
                except Exception as exc:
                    out.append(exc)
            return out

    def _target_logprobs(
        self, input_ids_B_T: torch.Tensor, targets_B_T: torch.Tensor, pixels: Pixels | None = None
    ) -> torch.Tensor:
        images = pixels_to(pixels, self.device, self.dtype)
        logits_B_T_V = self.pool.model(
            input_ids=input_ids_B_T, use_cache=False, **images
        ).logits.float()
        # log p(target) = -cross_entropy: one fused kernel instead of gather + logsumexp.
        nll_BT = torch.nn.functional.cross_entropy(
            logits_B_T_V.flatten(0, 1), targets_B_T.flatten(), reduction="none"
        )
        return -nll_BT.view_as(targets_B_T)

    # -- sampling --------------------------------------------------------------------------
    def sample(
        self, model_id: str | None, jobs: Sequence[SampleJob], on_tokens: TokenSink | None = None
    ) -> list[SampleResult]:
        """Sample for several requests of one adapter (``None``: the base model) in one batch."""
        return _one(self.sample_many([(model_id, jobs)], on_tokens))

    def sample_many(
        self,
        requests: Sequence[tuple[str | None, Sequence[SampleJob]]],
        on_tokens: TokenSink | None = None,
    ) -> list[list[SampleResult] | Exception]:
        """``sample`` for several sessions' requests in one continuous batch: each entry is what
        that request alone would return (seeded samples token for token), or its error.
        ``on_tokens`` hears tokens as drawn, ``job`` counting all requests' jobs in order."""
        with self._operation():
            self.calls["sample_many"] += 1
            out: dict[int, list[SampleResult] | Exception] = {}
            valid: list[int] = []
            for i, (model_id, jobs) in enumerate(requests):
                try:
                    prefix = len(jobs) > 1
                    for k, job in enumerate(jobs):
                        self.sampler.validate(job, f"requests[{k}]." if prefix else "")
                    if model_id is not None and model_id not in self.pool:
                        self.pool.config(model_id)  # raises UnknownAdapter
                    valid.append(i)
                except EngineError as exc:
                    out[i] = exc
            for wave in self._sample_waves(requests, valid):
                try:
                    out.update(self._sample_wave(requests, wave, on_tokens))
                except Exception as exc:
                    if self.ranks_in_step and not isinstance(exc, EngineError):
                        raise  # the other ranks are in this wave's collectives: stop together
                    out.update(dict.fromkeys(wave, exc))
            return [out[i] for i in range(len(requests))]

    def _sample_waves(
        self, requests: Sequence[tuple[str | None, Sequence[SampleJob]]], valid: list[int]
    ) -> list[list[int]]:
        """Requests in order, cut so that no wave needs more adapters than fit in memory."""
        waves: list[list[int]] = []
        adapters: set[str] = set()
        for i in valid:
            model_id = requests[i][0]
            new = model_id is not None and model_id not in adapters
            if not waves or (new and len(adapters) >= self.pool.max_loaded):
                waves.append([])
                adapters = set()
            waves[-1].append(i)
            if model_id is not None:
                adapters.add(model_id)
        return waves

    def _sample_wave(
        self,
        requests: Sequence[tuple[str | None, Sequence[SampleJob]]],
        wave: list[int],
        on_tokens: TokenSink | None,
    ) -> dict[int, list[SampleResult] | Exception]:
        ids = [m for m in (requests[i][0] for i in wave) if m is not None]
        names = dict(zip(ids, self.pool.load(ids), strict=True))
        jobs: list[SampleJob] = []
        adapters: list[str | None] = []
        numbers: list[int] = []  # each wave job's number among all requests' jobs
        for i in wave:
            model_id, request_jobs = requests[i]
            jobs += request_jobs
            adapters += [None if model_id is None else names[model_id]] * len(request_jobs)
            first = sum(len(r[1]) for r in requests[:i])
            numbers += range(first, first + len(request_jobs))
        results = self.sampler.run(jobs, adapters, on_tokens and _renumbered(on_tokens, numbers))
        out: dict[int, list[SampleResult] | Exception] = {}
        start = 0
        for i in wave:
            count = len(requests[i][1])
            mine = results[start : start + count]
            failed = next((r.error for r in mine if r.error is not None), None)
            out[i] = mine if failed is None else failed  # a grammar failed while sampling
            start += count
        return out

    def compute_logprobs(
        self, model_id: str | None, tokens: Sequence[int], last_n: int | None = None
    ) -> list[float | None]:
        """The logprob of every prompt token (None for the first, and before the last
        ``last_n`` when given)."""
        job = SampleJob(
            prompt=list(tokens),
            num_samples=1,
            max_tokens=1,
            prompt_logprobs=True,
            prompt_logprobs_last_n=last_n,
        )
        return self.sample(model_id, [job])[0].prompt_logprobs or []

    # -- checkpoints -----------------------------------------------------------------------
    def save_state(
        self, model_id: str, directory: Path, *, optimizer: bool = True
    ) -> checkpoints.CheckpointMeta:
        """Training state (adapter + AdamW) or, with ``optimizer=False``, sampler weights."""
        with self._operation():
            tensors = self.pool.state_dict(model_id)
            return checkpoints.write(
                Path(directory),
                kind=checkpoints.TRAINING_STATE if optimizer else checkpoints.SAMPLER_WEIGHTS,
                base_model=self.base_model,
                lora=self.pool.config(model_id),
                adapter_tensors=tensors,
                peft_config_json=self._peft_config_json(model_id),
                optimizer=self.pool.optimizer(model_id) if optimizer else None,
            )

    def _peft_config_json(self, model_id: str) -> dict:
        pcfg = self.pool.peft_config(model_id).to_dict()
        pcfg["base_model_name_or_path"] = str(self.materialized.path)
        pcfg["target_modules"] = (
            pcfg["target_modules"]
            if isinstance(pcfg["target_modules"], str)
            else sorted(pcfg["target_modules"])
        )
        return _jsonable(pcfg)

    def has_pending_gradients(self, model_id: str) -> bool:
        """Whether ``forward_backward`` left gradients that no ``optim_step`` has applied yet."""
        with self._operation():
            return any(p.grad is not None for p in self.pool.parameters(model_id).values())

    def capture(self, model_id: str) -> snapshots.Snapshot:
        """The adapter's whole training state, copied to the CPU (written later, elsewhere)."""
        with self._operation():
            params = self.pool.parameters(model_id)
            state = self.pool.optimizer(model_id)
            return snapshots.Snapshot(
                base_model=self.base_model,
                lora=self.pool.config(model_id),
                adapter=snapshots.copied(self.pool.state_dict(model_id)),
                optimizer=AdamState(
                    state.step, snapshots.copied(state.exp_avg), snapshots.copied(state.exp_avg_sq)
                ),
                gradients=snapshots.copied(
                    {k: p.grad for k, p in params.items() if p.grad is not None}
                ),
                peft_config_json=self._peft_config_json(model_id),
            )

    def restore(self, model_id: str, directory: Path) -> checkpoints.CheckpointMeta:
        """(Re)create the adapter from a snapshot folder: weights, AdamW state and pending
        gradients exactly as captured. Everything is read and checked before anything changes."""
        with self._operation():
            directory = Path(directory)
            meta = checkpoints.read_meta(directory)
            if meta.base_model != self.base_model:
                raise CheckpointError(
                    f"snapshot is for base model {meta.base_model!r}, this is {self.base_model!r}"
                )
            tensors = checkpoints.read_adapter(directory)
            state = checkpoints.read_optimizer(directory, meta)
            gradients = snapshots.read_gradients(directory)
            if model_id in self.pool:
                self.pool.remove(model_id)
            self.pool.create(model_id, meta.lora)
            try:
                self.pool.load_state_dict(model_id, tensors)
                params = self.pool.parameters(model_id)
                unknown = set(gradients) - set(params)
                if unknown:
                    raise CheckpointError(f"snapshot gradients for unknown {sorted(unknown)[:3]}")
                device = next(iter(params.values())).device
                self.pool.set_optimizer(model_id, state.to(device))
                for name, grad in gradients.items():
                    params[name].grad = grad.to(device)
            except BaseException:
                self.pool.remove(model_id)
                raise
            return meta

    def load_state(
        self, model_id: str, directory: Path, *, optimizer: bool
    ) -> checkpoints.CheckpointMeta:
        """Load adapter weights into an existing adapter of the same rank and targets.

        With ``optimizer`` the AdamW state is restored too (the checkpoint's optimizer family
        must be the model's); without it the optimizer starts fresh. The checkpoint's alpha is
        adopted (it is part of what the weights mean). Everything is read and checked before
        the adapter changes.
        """
        with self._operation():
            directory = Path(directory)
            meta = checkpoints.read_meta(directory)
            if meta.base_model != self.base_model:
                raise CheckpointError(
                    f"checkpoint is for base model {meta.base_model!r}, this model is {self.base_model!r}"
                )
            current = self.pool.config(model_id)
            shape = (
                meta.lora.rank,
                meta.lora.train_attn,
                meta.lora.train_mlp,
                meta.lora.train_unembed,
                meta.lora.train_projector,
            )
            if shape != (
                current.rank,
                current.train_attn,
                current.train_mlp,
                current.train_unembed,
                current.train_projector,
            ):
                raise CheckpointError(
                    f"checkpoint LoRA config {meta.lora} does not match the model's {current}"
                )
            if optimizer and meta.lora.optimizer != current.optimizer:
                raise CheckpointError(
                    f"checkpoint holds {meta.lora.optimizer} state; this model's optimizer is "
                    f"{current.optimizer} (load it without the optimizer)"
                )
            tensors = checkpoints.read_adapter(directory)
            state = checkpoints.read_optimizer(directory, meta) if optimizer else AdamState()
            if meta.lora.alpha != current.alpha:
                self.pool.remove(model_id)
                self.pool.create(model_id, dataclasses.replace(current, alpha=meta.lora.alpha))
            self.pool.load_state_dict(model_id, tensors)
            device = next(iter(self.pool.parameters(model_id).values())).device
            self.pool.set_optimizer(model_id, state.to(device))
            return meta

    def load_adapter_from(self, model_id: str, directory: Path) -> checkpoints.CheckpointMeta:
        """Create an adapter from a checkpoint (for sampling from saved weights)."""
        with self._operation():
            meta = checkpoints.read_meta(Path(directory))
            self.pool.create(model_id, meta.lora)
            try:
                self.load_state(model_id, Path(directory), optimizer=False)
            except BaseException:
                self.pool.remove(model_id)
                raise
            return meta

    def export_merged(self, model_id: str, directory: Path) -> Path:
        """A full model with the adapter merged in, loadable by plain transformers."""
        with self._operation(release=True):  # a second copy of the base model was freed
            directory = Path(directory)
            tmp = directory.with_name(directory.name + ".adapter")
            try:
                self.save_state(model_id, tmp, optimizer=False)
                self._write_merged(tmp, directory, untie=self.pool.config(model_id).train_unembed)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            return directory

    def _write_merged(self, adapter_dir: Path, directory: Path, *, untie: bool) -> None:
        base = self._load_base()
        if untie:
            _untie_output_embeddings(base)
        merged = PeftModel.from_pretrained(base, adapter_dir).merge_and_unload()
        merged.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        if self.vision is not None:
            self.vision.processor.save_pretrained(directory)


def _renumbered(on_tokens: TokenSink, numbers: list[int]) -> TokenSink:
    return lambda tokens: on_tokens([t._replace(job=numbers[t.job]) for t in tokens])


def _one(results: Sequence[_T | Exception]) -> _T:
    """The single result of a one-request batch, its error raised."""
    (result,) = results
    if isinstance(result, Exception):
        raise result
    return result


def _untie_output_embeddings(model: PreTrainedModel) -> None:
    """Merging a LoRA into a tied unembedding would also change the input embeddings."""
    if not getattr(model.config, "tie_word_embeddings", False):
        return
    out = model.get_output_embeddings()
    out.weight = torch.nn.Parameter(out.weight.detach().clone())
    model.config.tie_word_embeddings = False
    text_config = getattr(model.config, "get_text_config", lambda: None)()
    if text_config is not None:
        text_config.tie_word_embeddings = False


def _jsonable(obj):
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, str | int | float | bool) or obj is None:
        return obj
    return str(obj)
