"""The model host: one frozen base model, many sessions' LoRA adapters, every engine operation.

A host is used by one worker process; calls are serialised by a lock. Inputs are the SDK's wire
types; outputs too. Every operation validates its whole input before it touches the model, so a
rejected request leaves the session exactly as it was. After each operation, heap memory it freed
goes back to the OS once the process has grown by ``release_slack_mb`` (see ``memory``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from peft import PeftModel
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.utils import logging as hf_logging

from loopwright.types import (
    AdamParams,
    ForwardBackwardInput,
    ForwardBackwardOutput,
    OptimStepResponse,
    TensorData,
)

from . import batch as batching
from . import checkpoints, memory, snapshots
from .adapters import AdapterConfig, AdapterPool
from .catalog import MaterializedModel, ModelCatalog, default_catalog
from .errors import CheckpointError, InvalidInput
from .losses import resolve_loss
from .optim import AdamHyper, AdamState, adamw_step
from .sampler import SampleJob, Sampler, SampleResult


@dataclass(frozen=True)
class HostConfig:
    """How a host loads its base model and how much it holds."""

    device: str = "cpu"
    dtype: str | None = None  # default: float32 on CPU, bfloat16 on an accelerator
    max_loaded_adapters: int = 16
    max_lora_rank: int = 128
    max_batch_tokens: int = 16384  # padded tokens per forward/backward micro-batch
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
        model = AutoModelForCausalLM.from_pretrained(self.materialized.path, dtype=self.dtype)
        model.to(self.device).requires_grad_(False)  # type: ignore[arg-type]  # transformers' .to stub
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
            self.pool.model, self.tokenizer, self.vocab_size, self.context_length, self.device
        )
        self._lock = threading.RLock()
        self.memory = memory.HeapReleaser(self.config.release_slack_mb << 20)
        # told of each adapter spilled to disk to make room, with its whole state
        self.on_evict: Callable[[str, snapshots.Snapshot], None] | None = None
        self.pool.on_evict = self._evicted

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
        with self._operation():
            return self._run(model_id, fwd, backward=False)

    def forward_backward(self, model_id: str, fwd: ForwardBackwardInput) -> ForwardBackwardOutput:
        """Accumulate gradients of the summed loss into the adapter until ``optim_step``."""
        with self._operation():
            return self._run(model_id, fwd, backward=True)

    def optim_step(self, model_id: str, adam: AdamParams) -> OptimStepResponse:
        with self._operation():
            hp = AdamHyper(**adam.model_dump(include=set(AdamHyper.__dataclass_fields__)))
            hp.validate()
            params = self.pool.activate(model_id)
            metrics = adamw_step(params, self.pool.optimizer(model_id), hp)
            return OptimStepResponse(metrics=metrics)

    def _run(
        self, model_id: str | None, fwd: ForwardBackwardInput, *, backward: bool
    ) -> ForwardBackwardOutput:
        spec, cfg = resolve_loss(fwd.loss_fn, fwd.loss_fn_config)
        datums = batching.validate_datums(
            fwd.data, spec, fwd.loss_fn, self.vocab_size, self.context_length
        )
        params = self.pool.activate(model_id) if model_id is not None else {}
        saved_grads = {k: None if p.grad is None else p.grad.clone() for k, p in params.items()}
        logprobs: dict[int, np.ndarray] = {}
        losses: dict[int, np.ndarray] = {}
        total = 0.0
        try:
            for group in batching.group_by_budget(datums, self.config.max_batch_tokens):
                b = batching.pack(group, self.device)
                with torch.set_grad_enabled(backward), self._adapter_scope(model_id):
                    p_B_T = self._target_logprobs(b.input_ids_B_T, b.targets_B_T)
                    loss_B_T = spec.fn(p_B_T, b.inputs, cfg) * b.mask_B_T
                    self._check_finite(loss_B_T, b, fwd.loss_fn)
                    loss = loss_B_T.sum()
                    if backward:
                        loss.backward()
                total += float(loss.detach())
                for row, index in enumerate(b.indices):
                    n = b.lengths[row]
                    logprobs[index] = p_B_T[row, :n].detach().float().cpu().numpy()
                    losses[index] = loss_B_T[row, :n].detach().float().cpu().numpy()
        except BaseException:
            # Nothing half-applied: gradients return to what they were before this call.
            for k, p in params.items():
                p.grad = saved_grads[k]
            raise
        outputs = [
            {
                "logprobs": TensorData.from_numpy(logprobs[i]),
                "elementwise_loss": TensorData.from_numpy(losses[i]),
            }
            for i in range(len(datums))
        ]
        metrics = {"loss:sum": total, "tokens:sum": float(sum(d.length for d in datums))}
        return ForwardBackwardOutput(
            loss_fn_output_type="ArrayRecord", loss_fn_outputs=outputs, metrics=metrics
        )

    def _adapter_scope(self, model_id: str | None):
        if model_id is None:
            return self.pool.model.disable_adapter()
        return contextlib.nullcontext()

    def _target_logprobs(
        self, input_ids_B_T: torch.Tensor, targets_B_T: torch.Tensor
    ) -> torch.Tensor:
        logits_B_T_V = self.pool.model(input_ids=input_ids_B_T, use_cache=False).logits.float()
        # log p(target) = -cross_entropy: one fused kernel instead of gather + logsumexp.
        nll_BT = torch.nn.functional.cross_entropy(
            logits_B_T_V.flatten(0, 1), targets_B_T.flatten(), reduction="none"
        )
        return -nll_BT.view_as(targets_B_T)

    @staticmethod
    def _check_finite(loss_B_T: torch.Tensor, b: batching.Batch, loss_fn: str) -> None:
        bad = ~torch.isfinite(loss_B_T.detach())
        if bool(bad.any()):
            row, col = (int(x) for x in bad.nonzero()[0])
            raise InvalidInput(
                f"data[{b.indices[row]}]",
                f"{loss_fn} loss is not finite at position {col} (check logprobs and advantages)",
            )

    # -- sampling --------------------------------------------------------------------------
    def sample(self, model_id: str | None, jobs: Sequence[SampleJob]) -> list[SampleResult]:
        """Sample for several requests of one adapter (``None``: the base model) in one batch."""
        with self._operation():
            if model_id is None:
                with self.pool.model.disable_adapter():
                    return self.sampler.run(jobs)
            self.pool.activate(model_id)
            return self.sampler.run(jobs)

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
            )
            if shape != (
                current.rank,
                current.train_attn,
                current.train_mlp,
                current.train_unembed,
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
        base = AutoModelForCausalLM.from_pretrained(self.materialized.path, dtype=self.dtype)
        if untie:
            _untie_output_embeddings(base)
        merged = PeftModel.from_pretrained(base, adapter_dir).merge_and_unload()
        merged.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)


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
