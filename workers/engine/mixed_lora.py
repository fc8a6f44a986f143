"""Mixed-adapter LoRA: one forward pass over batch rows of many adapters, each row with its own.

peft holds the adapters' weights (and stays the checkpoint format); this module replaces the
forward of every peft LoRA linear layer. Around a model call, ``LoRARouter.rows(plan)`` says which
adapter each batch row uses; every LoRA layer then adds ``B_a(A_a(x_rows)) * scaling_a`` for each
adapter ``a`` to its own rows only, so an adapter's gradients come from its rows alone. Rows are
grouped by adapter (contiguous slices when the caller sorts them, index lists otherwise): plain
torch, one pair of matmuls per adapter and layer, the place a fused kernel would go. With no plan
set, a layer runs peft's own forward (peft's active adapter), as before.

A vision-language model's projector reads images, not rows: its dim 0 is the batch's images in
row order. Its LoRA layers (``per_image``) follow the plan's ``images``, each image taking the
adapter of the row it belongs to.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from peft.tuners.lora import Linear as LoraLinear

Rows = slice | torch.Tensor | None  # None: every row of the batch


@dataclass(frozen=True)
class RowPlan:
    """Which rows of the batch each adapter (peft name) adapts; rows of no group use the base
    model alone."""

    groups: tuple[tuple[str, Rows], ...]
    rows: int = 0  # batch size (needed only for the stacked path)
    # per set of adapters a layer has: each row's scaling on the stacked rank columns
    scales: dict = field(default_factory=dict, compare=False, repr=False)
    # the same for the batch's images (dim 0 of a projector's input); None: no image
    images: RowPlan | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(
        cls,
        names: Sequence[str | None],
        device: torch.device,
        images_per_row: Sequence[int] | None = None,
    ) -> RowPlan:
        """A plan from each row's adapter name (None: the base model), and from how many
        images each row holds (their pixels concatenated in row order)."""
        images = None
        if images_per_row is not None and any(images_per_row):
            per_image = [n for n, k in zip(names, images_per_row, strict=True) for _ in range(k)]
            images = cls.of(per_image, device)
        positions: dict[str, list[int]] = {}
        for row, name in enumerate(names):
            if name is not None:
                positions.setdefault(name, []).append(row)
        groups: list[tuple[str, Rows]] = []
        for name, rows in positions.items():
            first, last = rows[0], rows[-1]
            if len(rows) == len(names):
                groups.append((name, None))
            elif last - first + 1 == len(rows):  # contiguous: a view, no copy
                groups.append((name, slice(first, last + 1)))
            else:
                groups.append((name, torch.tensor(rows, device=device)))
        return cls(tuple(groups), len(names), images=images)


class LoRARouter:
    """Routes each batch row through its own adapter in every peft LoRA linear layer."""

    def __init__(self, model: torch.nn.Module, per_image: Sequence[str] = ()) -> None:
        self.model = model
        self.per_image = tuple(per_image)  # module paths (in the base) of projector layers
        self.plan: RowPlan | None = None
        self._stacks: dict | None = None  # while weights are frozen: concatenated A and B
        self.refresh()

    def refresh(self) -> None:
        """Take over layers peft wrapped since the last call (a new adapter's new targets)."""
        for name, module in self.model.named_modules():
            if isinstance(module, LoraLinear) and not getattr(module, "_lw_routed", False):
                images = any(name == p or name.endswith("." + p) for p in self.per_image)
                module.forward = _routed_forward(module, self, images)  # type: ignore[method-assign]
                setattr(module, "_lw_routed", True)  # noqa: B010  # nn.Module typing

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """No weight changes inside (sampling): gradient-free passes over several adapters may
        run every layer as one stacked LoRA, its concatenated A and B built once."""
        self._stacks = {}
        try:
            yield
        finally:
            self._stacks = None

    @contextlib.contextmanager
    def rows(self, plan: RowPlan) -> Iterator[None]:
        previous, self.plan = self.plan, plan
        try:
            yield
        finally:
            self.plan = previous


def _lora(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.linear(torch.nn.functional.linear(x, a), b)


def _stacked(layer: LoraLinear, plan: RowPlan, stacks: dict, x: torch.Tensor) -> torch.Tensor:
    """Every row's LoRA delta from one concatenation of the plan's adapters: ``x @ A_cat^T``
    gives each row every adapter's rank features, a per-row scaling keeps its own adapter's
    columns (zeros elsewhere), and ``@ B_cat^T`` maps them back: three ops per layer, whatever
    the number of adapters."""
    names = tuple(n for n, _ in plan.groups if n in layer.lora_A)
    key = (id(layer), names)
    stack = stacks.get(key)
    if stack is None:
        a_cat = torch.cat([cast(torch.Tensor, layer.lora_A[n].weight) for n in names])
        b_cat = torch.cat([cast(torch.Tensor, layer.lora_B[n].weight) for n in names], dim=1)
        stack = stacks[key] = (a_cat, b_cat)
    a_cat, b_cat = stack
    scales = plan.scales.get(names)
    if scales is None:
        scales = a_cat.new_zeros(plan.rows, a_cat.shape[0])
        col = 0
        rows_of = dict(plan.groups)
        for n in names:
            r = cast(torch.Tensor, layer.lora_A[n].weight).shape[0]
            rows = rows_of[n]
            scales[slice(None) if rows is None else rows, col : col + r] = layer.scaling[n]
            col += r
        plan.scales[names] = scales
    features = torch.nn.functional.linear(x.to(a_cat.dtype), a_cat)
    shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (a_cat.shape[0],)
    return torch.nn.functional.linear(features * scales.view(shape), b_cat)


def _routed_forward(layer: LoraLinear, router: LoRARouter, images: bool = False):
    peft_forward = type(layer).forward

    def forward(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        plan = router.plan
        if plan is None:
            return peft_forward(layer, x, *args, **kwargs)
        if images:  # a projector layer: its rows are the batch's images
            plan = plan.images
            if plan is None:
                return layer.base_layer(x, *args, **kwargs)
        result = layer.base_layer(x, *args, **kwargs)
        dtype = result.dtype
        if router._stacks is not None and len(plan.groups) > 1 and not torch.is_grad_enabled():
            return (result + _stacked(layer, plan, router._stacks, x)).to(dtype)
        pieces: list[tuple[int, int, torch.Tensor]] = []  # contiguous rows' deltas
        for name, rows in plan.groups:
            if name not in layer.lora_A:  # this adapter does not adapt this layer
                continue
            a = cast(torch.Tensor, layer.lora_A[name].weight)
            b = cast(torch.Tensor, layer.lora_B[name].weight)
            scaling = layer.scaling[name]
            if rows is None:  # every row: peft's own arithmetic, in its order
                return (result + _lora(x.to(a.dtype), a, b) * scaling).to(dtype)
            if isinstance(rows, slice):
                pieces.append((rows.start, rows.stop, _lora(x[rows].to(a.dtype), a, b) * scaling))
            else:
                delta = _lora(x.index_select(0, rows).to(a.dtype), a, b) * scaling
                result = result.index_add(0, rows, delta.to(dtype))
        if pieces:
            # One out-of-place add of every segment's delta (zeros between segments): in-place
            # adds into row slices would make autograd copy the whole output once per segment.
            pieces.sort(key=lambda piece: piece[0])
            parts, at = [], 0
            for start, stop, delta in pieces:
                if start > at:
                    parts.append(delta.new_zeros((start - at, *delta.shape[1:])))
                parts.append(delta)
                at = stop
            if at < result.shape[0]:
                parts.append(parts[-1].new_zeros((result.shape[0] - at, *result.shape[1:])))
            result = (result + torch.cat(parts)).to(dtype)
        return result

    return forward
