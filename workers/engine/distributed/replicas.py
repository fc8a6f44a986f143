"""Keeping one adapter identical on every rank: gradient all-reduce, state broadcast, digests.

Every function is a collective: each rank calls it at the same point with the same model id,
holding its host (``ModelHost.exclusive``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import torch
import torch.distributed as dist

from ..host import ModelHost
from ..optim import AdamState
from .group import RankGroup


def reduce_gradients(
    params: Mapping[str, torch.nn.Parameter], before: Mapping[str, torch.Tensor | None]
) -> None:
    """Sum every rank's gradient of this call (each ``p.grad`` holds only this call's share)
    into every rank, then add it to the gradient held before the call. One all-reduce over a
    flat buffer; a presence flag per parameter keeps "no gradient" (None) apart from zeros."""
    names = sorted(params)
    if not names:
        return
    first = params[names[0]]
    grads = [params[n].grad for n in names]
    presence_P = torch.tensor(
        [0.0 if g is None else 1.0 for g in grads], dtype=first.dtype, device=first.device
    )
    pieces = [
        (torch.zeros_like(params[n]) if g is None else g).reshape(-1)
        for n, g in zip(names, grads, strict=True)
    ]
    flat = torch.cat([*pieces, presence_P])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    presence = flat[-len(names) :].tolist()
    at = 0
    for k, name in enumerate(names):
        p = params[name]
        summed = flat[at : at + p.numel()].view_as(p)
        at += p.numel()
        previous = before.get(name)
        if presence[k] == 0:
            p.grad = previous
        else:
            p.grad = summed.clone() if previous is None else previous + summed


def restore_gradients(
    params: Mapping[str, torch.nn.Parameter], before: Mapping[str, torch.Tensor | None]
) -> None:
    for name, p in params.items():
        p.grad = before.get(name)


def broadcast_adapter(host: ModelHost, group: RankGroup, model_id: str) -> None:
    """Rank 0's adapter (config, weights, optimizer state, pending gradients) on every rank;
    a follower (re)creates the adapter when it lacks it or its config differs. The optimizer's
    second moments are absent under Dimuon (its state is the momentum alone)."""
    header = None
    if group.is_coordinator:
        params = host.pool.parameters(model_id)
        state = host.pool.optimizer(model_id)
        header = (
            host.pool.config(model_id),
            state.step,
            sorted(state.exp_avg),
            sorted(state.exp_avg_sq),
            sorted(n for n, p in params.items() if p.grad is not None),
        )
    config, step, moment_names, square_names, grad_names = group.broadcast(header)
    if not group.is_coordinator:
        if model_id in host.pool and host.pool.config(model_id) != config:
            host.remove_adapter(model_id)
        if model_id not in host.pool:
            host.create_adapter(model_id, config)
    params = host.pool.parameters(model_id)
    names = sorted(params)
    shapes = (
        [("w", n) for n in names]
        + [("m", n) for n in moment_names]
        + [("v", n) for n in square_names]
        + [("g", n) for n in grad_names]
    )
    numel = [params[n].numel() for _, n in shapes]
    device, dtype = params[names[0]].device, params[names[0]].dtype
    if group.is_coordinator:
        state = host.pool.optimizer(model_id)
        source: dict[str, Mapping[str, torch.Tensor]] = {
            "w": {n: p.detach() for n, p in params.items()},
            "m": state.exp_avg,
            "v": state.exp_avg_sq,
            "g": {n: p.grad for n, p in params.items() if p.grad is not None},
        }
        flat = torch.cat([source[kind][n].reshape(-1).to(dtype) for kind, n in shapes])
    else:
        flat = torch.empty(sum(numel), dtype=dtype, device=device)
    dist.broadcast(flat, src=0)
    if group.is_coordinator:
        return
    pieces = dict(zip(shapes, torch.split(flat, numel), strict=True))

    def tensor(kind: str, name: str) -> torch.Tensor:
        return pieces[(kind, name)].view_as(params[name]).clone()

    host.pool.load_state_dict(model_id, {n: tensor("w", n) for n in names})  # clears grads
    for n in grad_names:
        params[n].grad = tensor("g", n)
    host.pool.set_optimizer(
        model_id,
        AdamState(
            step,
            {n: tensor("m", n) for n in moment_names},
            {n: tensor("v", n) for n in square_names},
        ),
    )


def state_digest(host: ModelHost, model_id: str) -> str:
    """sha256 of the adapter's weights, optimizer moments and step, and pending gradients, bit
    for bit."""
    digest = hashlib.sha256()
    params = host.pool.parameters(model_id)
    state = host.pool.optimizer(model_id)
    digest.update(str(state.step).encode())
    for kind, tensors in (
        ("w", {n: p.detach() for n, p in params.items()}),
        ("m", state.exp_avg),
        ("v", state.exp_avg_sq),
        ("g", {n: p.grad for n, p in params.items() if p.grad is not None}),
    ):
        for name in sorted(tensors):
            digest.update(f"{kind}:{name}".encode())
            digest.update(
                tensors[name].detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()
            )
    return digest.hexdigest()
