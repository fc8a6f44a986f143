"""Many LoRA adapters on one frozen base model (peft), with LRU eviction to disk.

Each adapter is a peft adapter named after its model id, with its own rank, alpha, seed,
target layers and optimizer family, its pending gradients and its optimizer state. A forward pass
routes each batch row through its own adapter (``mixed_lora``), so training one never touches
another. Adapters beyond ``max_loaded`` are spilled to disk (weights, pending gradients, optimizer
state) and come back transparently.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import cast

import peft
import torch
from peft import PeftModel
from transformers import PreTrainedModel

from .errors import InvalidInput, UnknownAdapter
from .mixed_lora import LoRARouter
from .optim import AdamState, optimizer_family

PLACEHOLDER = "lw_placeholder"
_ATTN = re.compile(r"(self_attn|attention|attn)\.")
_MLP = re.compile(r"(mlp|feed_forward|ffn)\.")
_PROJECTOR_NAMES = ("multi_modal_projector", "mm_projector", "connector", "merger")


@dataclass(frozen=True)
class AdapterConfig:
    """What a LoRA adapter adapts and how it starts."""

    rank: int
    alpha: float = 32.0
    seed: int | None = None
    train_attn: bool = True
    train_mlp: bool = True
    train_unembed: bool = True
    optimizer: str = "adamw"  # fixed for the adapter's lifetime; saved with its state
    train_projector: bool = False  # a VLM's projector (between vision tower and language model)

    def to_dict(self) -> dict:
        out = asdict(self)
        if not self.train_projector:  # written only when on: older workers read the rest
            del out["train_projector"]
        return out


def linear_targets(model: PreTrainedModel) -> dict[str, list[str]]:
    """Names of the base model's linear layers by group: attn, mlp, unembed, and a
    vision-language model's projector. Its vision encoder stays frozen: never a target."""
    groups: dict[str, list[str]] = {"attn": [], "mlp": [], "unembed": [], "projector": []}
    out_emb = model.get_output_embeddings()
    vision = _vision_encoder(model)
    frozen = set() if vision is None else {id(m) for m in vision.modules()}
    projector = None if vision is None else _projector(model, frozen)
    in_projector = set() if projector is None else {id(m) for m in projector.modules()}
    for name, module in model.named_modules():
        if id(module) in frozen:
            continue
        if module is out_emb:
            groups["unembed"].append(name)
        elif isinstance(module, torch.nn.Linear):
            if id(module) in in_projector:
                groups["projector"].append(name)
            elif _ATTN.search(name):
                groups["attn"].append(name)
            elif _MLP.search(name):
                groups["mlp"].append(name)
    return groups


def _vision_encoder(model: PreTrainedModel) -> torch.nn.Module | None:
    for owner in (model, getattr(model, "model", None)):
        for name in ("vision_tower", "vision_model", "visual"):
            module = getattr(owner, name, None)
            if isinstance(module, torch.nn.Module):
                return module
    return None


def _projector(model: PreTrainedModel, frozen: set[int]) -> torch.nn.Module | None:
    """The module that maps the vision tower's features into the language model (LLaVA's
    ``multi_modal_projector``), found by name outside the vision tower."""
    for name, module in model.named_modules():
        if id(module) not in frozen and name.rsplit(".", 1)[-1] in _PROJECTOR_NAMES:
            return module
    return None


def peft_config(cfg: AdapterConfig, targets: dict[str, list[str]]) -> peft.LoraConfig:
    chosen = []
    for group, on in (
        ("attn", cfg.train_attn),
        ("mlp", cfg.train_mlp),
        ("unembed", cfg.train_unembed),
        ("projector", cfg.train_projector),
    ):
        if on:
            chosen += targets[group]
    if cfg.train_projector and not targets["projector"]:
        raise InvalidInput(
            "lora_config.train_projector", "the base model has no projector (not a VLM)"
        )
    if not chosen:
        raise InvalidInput("lora_config", "train_attn, train_mlp and train_unembed are all false")
    # Exact module paths: a leaf such as "lm_head" must not match elsewhere.
    pattern = "^(" + "|".join(re.escape(n) for n in sorted(chosen)) + ")$"
    return peft.LoraConfig(
        r=cfg.rank,
        lora_alpha=cfg.alpha,  # type: ignore[arg-type]  # peft types it int; scaling takes a float
        lora_dropout=0.0,
        target_modules=pattern,
        bias="none",
    )


def adapter_name(model_id: str) -> str:
    """peft adapter names must be identifiers that do not collide with its own prefixes."""
    return "lw_" + hashlib.sha1(model_id.encode()).hexdigest()[:16]  # noqa: S324 — a short name for an adapter, not a security digest


@dataclass
class _Entry:
    model_id: str
    config: AdapterConfig
    optimizer: AdamState
    loaded: bool = True


class AdapterPool:
    """The adapters of one host. Not thread-safe: the host serialises calls."""

    def __init__(self, base: PreTrainedModel, *, max_loaded: int, max_rank: int, spill_dir: Path):
        self.targets = linear_targets(base)
        self.max_loaded = max_loaded
        self.max_rank = max_rank
        self.spill_dir = spill_dir
        spill_dir.mkdir(parents=True, exist_ok=True)
        # A rank-1 placeholder keeps the peft wrapper alive when no session has an adapter;
        # it is never active for user work (base-model calls run with adapters disabled).
        placeholder = peft.LoraConfig(
            r=1, lora_alpha=1, target_modules="^(" + re.escape(self._any_target()) + ")$"
        )
        with _quiet():
            self.model: PeftModel = peft.get_peft_model(base, placeholder, adapter_name=PLACEHOLDER)
        self.model.eval()
        self.router = LoRARouter(self.model, per_image=self.targets["projector"])
        self._entries: dict[str, _Entry] = {}
        self._lru: OrderedDict[str, None] = OrderedDict()
        self._param_cache: dict[str, dict[str, torch.nn.Parameter]] = {}
        # told of each adapter about to be spilled, with its state (weights, grads, optimizer)
        self.on_evict: Callable[[str, AdapterConfig, dict], None] | None = None

    def _any_target(self) -> str:
        for group in ("attn", "mlp", "unembed"):
            if self.targets[group]:
                return self.targets[group][0]
        raise InvalidInput("base_model", "has no linear layers LoRA can adapt")

    # -- lifecycle -------------------------------------------------------------------------
    def __contains__(self, model_id: str) -> bool:
        return model_id in self._entries

    def ids(self) -> list[str]:
        return list(self._entries)

    def loaded_ids(self) -> list[str]:
        return list(self._lru)

    def config(self, model_id: str) -> AdapterConfig:
        return self._entry(model_id).config

    def optimizer(self, model_id: str) -> AdamState:
        entry = self._entry(model_id)
        if not entry.loaded:  # an evicted adapter's optimizer state lives on disk
            self.load([model_id])
        return entry.optimizer

    def set_optimizer(self, model_id: str, state: AdamState) -> None:
        self._entry(model_id).optimizer = state

    def create(self, model_id: str, cfg: AdapterConfig) -> None:
        if model_id in self._entries:
            raise InvalidInput("model_id", f"{model_id!r} already exists on this host")
        if not 1 <= cfg.rank <= self.max_rank:
            raise InvalidInput("lora_config.rank", f"{cfg.rank} is outside [1, {self.max_rank}]")
        if not cfg.alpha > 0:
            raise InvalidInput("lora_config.alpha", f"{cfg.alpha} must be > 0")
        optimizer_family({"type": cfg.optimizer})
        pcfg = peft_config(cfg, self.targets)
        self._make_room()
        self._inject(model_id, cfg, pcfg)
        self._entries[model_id] = _Entry(model_id, cfg, AdamState())
        self._lru[model_id] = None

    def remove(self, model_id: str) -> None:
        entry = self._entry(model_id)
        if entry.loaded:
            self._delete(model_id)
            self._lru.pop(model_id, None)
        self._spill_path(model_id).unlink(missing_ok=True)
        del self._entries[model_id]
        if not self._lru:
            self.model.set_adapter(PLACEHOLDER)

    def load(self, model_ids: Sequence[str]) -> list[str]:
        """Make every adapter resident (at most ``max_loaded`` distinct ones), each trainable, for
        one mixed pass; returns their peft names. peft's active adapter is left as it was."""
        distinct = list(dict.fromkeys(model_ids))
        if len(distinct) > self.max_loaded:
            raise InvalidInput("model_ids", f"{len(distinct)} adapters exceed {self.max_loaded}")
        for model_id in distinct:
            entry = self._entry(model_id)
            if not entry.loaded:
                self._make_room()
                self._reload(entry)
            self._lru.move_to_end(model_id)
        for model_id in distinct:
            # peft's set_adapter turns gradients off for every adapter but the active one
            for p in self._params(model_id).values():
                p.requires_grad_(True)
        return [adapter_name(m) for m in model_ids]

    def parameters(self, model_id: str) -> dict[str, torch.nn.Parameter]:
        """The adapter's parameters (loading it if evicted), under peft's saved-key names."""
        self.load([model_id])
        return self._params(model_id)

    def _params(self, model_id: str) -> dict[str, torch.nn.Parameter]:
        cached = self._param_cache.get(model_id)
        if cached is None:
            marker = "." + adapter_name(model_id) + "."
            named = self.model.named_parameters()
            cached = {n.replace(marker, "."): p for n, p in named if marker in n}
            self._param_cache[model_id] = cached
        return cached

    def state_dict(self, model_id: str) -> dict[str, torch.Tensor]:
        """The LoRA matrices under peft's saved-key names (never the frozen base unembedding,
        even when lm_head is adapted). Read from the adapter's own parameters, not through the
        model's ``state_dict()``: on a base sharded with FSDP that would reshard the base on
        this rank alone and put it out of step with the other ranks."""
        return {name: p.detach() for name, p in self.parameters(model_id).items()}

    def load_state_dict(self, model_id: str, tensors: dict[str, torch.Tensor]) -> None:
        self.load([model_id])
        params = self._params(model_id)
        missing = set(params) - set(tensors)
        unexpected = set(tensors) - set(params)
        if missing or unexpected:
            raise InvalidInput(
                "checkpoint",
                f"adapter tensors do not match: missing {sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]}",
            )
        for name, p in params.items():
            if tuple(tensors[name].shape) != tuple(p.shape):
                raise InvalidInput(
                    "checkpoint",
                    f"{name} has shape {list(tensors[name].shape)}, expected {list(p.shape)}",
                )
        with torch.no_grad():
            for name, p in params.items():
                p.copy_(tensors[name])
                p.grad = None

    def peft_config(self, model_id: str) -> peft.LoraConfig:
        if adapter_name(model_id) not in self.model.peft_config:
            self.load([model_id])  # an evicted adapter's peft config went with its layers
        return cast(peft.LoraConfig, self.model.peft_config[adapter_name(model_id)])

    # -- internals -------------------------------------------------------------------------
    def _entry(self, model_id: str) -> _Entry:
        try:
            return self._entries[model_id]
        except KeyError:
            raise UnknownAdapter(model_id) from None

    def _delete(self, model_id: str) -> None:
        """Drop its peft layers. The placeholder becomes active first: deleting the active adapter
        would make peft activate another session's adapter and warn (a new message, hence a log
        line and a warnings-registry entry, for every adapter ever removed)."""
        name = adapter_name(model_id)
        if name in self.model.active_adapters:
            self.model.set_adapter(PLACEHOLDER)
        self.model.delete_adapter(name)
        self._forget(model_id)

    def _forget(self, model_id: str) -> None:
        """Its peft layers changed: drop its cached parameters."""
        self._param_cache.pop(model_id, None)

    def _inject(self, model_id: str, cfg: AdapterConfig, pcfg: peft.LoraConfig) -> None:
        self._forget(model_id)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed if cfg.seed is not None else torch.seed())
            with _quiet():
                self.model.add_adapter(adapter_name(model_id), pcfg)
        self.router.refresh()
        # peft creates the new adapter's weights in the base dtype on its device; train in fp32.
        for p in self._params(model_id).values():
            p.data = p.data.float()

    def _make_room(self) -> None:
        while len(self._lru) >= self.max_loaded:
            victim, _ = self._lru.popitem(last=False)
            self._evict(self._entries[victim])

    def _spill_path(self, model_id: str) -> Path:
        return self.spill_dir / f"{adapter_name(model_id)}.pt"

    def _evict(self, entry: _Entry) -> None:
        params = self._params(entry.model_id)
        blob = {
            "weights": {k: p.detach().cpu().clone() for k, p in params.items()},
            "grads": {k: p.grad.cpu().clone() for k, p in params.items() if p.grad is not None},
            "optimizer_step": entry.optimizer.step,
            "optimizer": {k: v.cpu() for k, v in entry.optimizer.tensors().items()},
        }
        if self.on_evict is not None:
            self.on_evict(entry.model_id, entry.config, blob)
        torch.save(blob, self._spill_path(entry.model_id))
        self._delete(entry.model_id)
        entry.optimizer = AdamState()
        entry.loaded = False

    def _reload(self, entry: _Entry) -> None:
        path = self._spill_path(entry.model_id)
        blob = torch.load(path, map_location="cpu", weights_only=True)
        self._inject(entry.model_id, entry.config, peft_config(entry.config, self.targets))
        entry.loaded = True
        self._lru[entry.model_id] = None
        device = next(iter(self._params(entry.model_id).values())).device
        params = self._params(entry.model_id)
        with torch.no_grad():
            for k, p in params.items():
                p.copy_(blob["weights"][k])
                p.grad = blob["grads"][k].to(device) if k in blob["grads"] else None
        entry.optimizer = AdamState.from_tensors(blob["optimizer_step"], blob["optimizer"]).to(
            device
        )
        path.unlink()


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """peft warns about tied unembeddings (merges untie first) and transformers deprecations."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*tie_word_embeddings.*")
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")
        yield
