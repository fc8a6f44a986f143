"""forward / forward_backward for many sessions' requests in shared passes over the base model.

Every request's datums go into micro-batches (a padded-token budget) next to other requests'
datums; rows are sorted by adapter so each adapter adapts a contiguous block (``mixed_lora``).
Each request's loss is computed on its own rows with its own loss function and config, and the
sum of all requests' losses is backpropagated once: an adapter's gradient is that of its own
requests' losses, exactly as if they ran alone. A request whose loss is not finite fails alone:
every gradient returns to what it was before the call and the others run again without it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from loopwright.types import ForwardBackwardInput, ForwardBackwardOutput, TensorData

from .adapters import AdapterPool
from .datums import PackedDatum, validate_datums
from .errors import EngineError, InvalidInput
from .losses import LossSpec, resolve_loss
from .mixed_lora import RowPlan
from .vision import Pixels, VisionInputs, concat_pixels, image_count


@dataclass(frozen=True)
class PassRequest:
    """One forward (``backward=False``) or forward_backward request of one session."""

    model_id: str | None  # None: the base model (forward only)
    fwd: ForwardBackwardInput
    backward: bool = True


@dataclass
class _Job:
    """A validated request and what its rows produced so far."""

    request: PassRequest
    spec: LossSpec
    cfg: dict[str, float]
    datums: list[PackedDatum]
    adapter: str | None = None  # peft name
    logprobs: dict[int, np.ndarray] = field(default_factory=dict)
    losses: dict[int, np.ndarray] = field(default_factory=dict)
    total: float = 0.0
    sums: dict[str, float] = field(default_factory=dict)  # the loss's own ``name:sum`` metrics

    def reset(self) -> None:
        self.logprobs, self.losses, self.total, self.sums = {}, {}, 0.0, {}

    def output(self) -> ForwardBackwardOutput:
        outputs = [
            {
                "logprobs": TensorData.from_numpy(self.logprobs[i]),
                "elementwise_loss": TensorData.from_numpy(self.losses[i]),
            }
            for i in range(len(self.datums))
        ]
        tokens = float(sum(d.length for d in self.datums))
        return ForwardBackwardOutput(
            loss_fn_output_type="ArrayRecord",
            loss_fn_outputs=outputs,
            metrics={**self.sums, "loss:sum": self.total, "tokens:sum": tokens},
        )


@dataclass
class _Row:
    job: int
    datum: PackedDatum


# (input ids, target ids, the rows' image tensors in row order or None) -> target logprobs
TargetLogprobs = Callable[[torch.Tensor, torch.Tensor, Pixels | None], torch.Tensor]


class MixedPass:
    """Runs requests of many adapters together on one pool's model."""

    def __init__(
        self,
        pool: AdapterPool,
        target_logprobs: TargetLogprobs,
        vocab_size: int,
        context_length: int,
        max_batch_tokens: int,
        device: torch.device,
    ) -> None:
        self.pool = pool
        self.target_logprobs = target_logprobs
        self.vocab_size = vocab_size
        self.context_length = context_length
        self.max_batch_tokens = max_batch_tokens
        self.device = device
        # Told, between each micro-batch's loss and its backward, whether a loss here was not
        # finite; raising aborts the pass (ranks of a sharded base agree here to stay in step).
        self.before_backward: Callable[[bool], None] | None = None
        # A vision-language base: inputs may hold images (None: token chunks only).
        self.vision: VisionInputs | None = None

    def run(self, requests: Sequence[PassRequest]) -> list[ForwardBackwardOutput | Exception]:
        """Each request's output, or the error that request alone would have raised. A failure
        that is not the request's fault (e.g. out of memory) fails its whole wave, with every
        gradient of the wave as it was before; earlier waves keep their results."""
        results: dict[int, ForwardBackwardOutput | Exception] = {}
        jobs: dict[int, _Job] = {}
        for i, req in enumerate(requests):
            try:
                jobs[i] = self.validate(req)
            except EngineError as exc:
                results[i] = exc
        for wave in self._waves(jobs):
            try:
                results.update(self._run_wave(wave))
            except Exception as exc:
                results.update(dict.fromkeys(wave, exc))
        return [results[i] for i in range(len(requests))]

    def validate(self, req: PassRequest) -> _Job:
        """Check a request exactly as ``run`` does, without running it."""
        if req.backward and req.model_id is None:
            raise InvalidInput("model_id", "the base model has no adapter to train")
        spec, cfg = resolve_loss(req.fwd.loss_fn, req.fwd.loss_fn_config)
        datums = validate_datums(
            req.fwd.data, spec, req.fwd.loss_fn, self.vocab_size, self.context_length, self.vision
        )
        if req.model_id is not None and req.model_id not in self.pool:
            self.pool.config(req.model_id)  # raises UnknownAdapter
        return _Job(req, spec, cfg, datums)

    def _waves(self, jobs: Mapping[int, _Job]) -> list[dict[int, _Job]]:
        """Requests in order, cut so that no wave needs more adapters than fit in memory."""
        waves: list[dict[int, _Job]] = []
        adapters: set[str] = set()
        for i, job in jobs.items():
            mid = job.request.model_id
            new = mid is not None and mid not in adapters
            if not waves or (new and len(adapters) >= self.pool.max_loaded):
                waves.append({})
                adapters = set()
            waves[-1][i] = job
            if mid is not None:
                adapters.add(mid)
        return waves

    def _run_wave(self, wave: dict[int, _Job]) -> dict[int, ForwardBackwardOutput | Exception]:
        ids = [j.request.model_id for j in wave.values() if j.request.model_id is not None]
        names = dict(zip(ids, self.pool.load(ids), strict=True))
        for job in wave.values():
            mid = job.request.model_id
            job.adapter = None if mid is None else names[mid]
        trained = {j.request.model_id for j in wave.values() if j.request.backward}
        params = [p for m in trained if m is not None for p in self.pool.parameters(m).values()]
        saved = [None if p.grad is None else p.grad.clone() for p in params]
        outcomes: dict[int, ForwardBackwardOutput | Exception] = {}
        live = dict(wave)
        while live:
            try:
                failed = self._attempt(live)
            except BaseException:
                _restore(params, saved)
                raise
            if not failed:
                break
            # Nothing half-applied: back to the gradients before the call, then the rest again.
            _restore(params, saved)
            for i, exc in failed.items():
                outcomes[i] = exc
                del live[i]
            for job in live.values():
                job.reset()
        for i, job in live.items():
            outcomes[i] = job.output()
        return outcomes

    def _attempt(self, live: dict[int, _Job]) -> dict[int, InvalidInput]:
        """One try over every live request; stops at the first micro-batch with a non-finite
        loss and names the requests that failed there."""
        for backward in (True, False):
            rows = [
                _Row(i, d)
                for i, j in live.items()
                if j.request.backward == backward
                for d in j.datums
            ]
            for group in _group_rows(rows, self.max_batch_tokens):
                failed = self._micro_batch(group, live, backward)
                if failed:
                    return failed
        return {}

    def _micro_batch(
        self, rows: list[_Row], live: dict[int, _Job], backward: bool
    ) -> dict[int, InvalidInput]:
        # Sort by adapter then request: each adapter's rows and each request's rows contiguous.
        order = sorted(rows, key=lambda r: (live[r.job].adapter or "", r.job, r.datum.index))
        spans: dict[int, tuple[int, int]] = {}
        for pos, r in enumerate(order):
            start, _ = spans.get(r.job, (pos, pos))
            spans[r.job] = (start, pos + 1)
        ids_B_T, targets_B_T, mask_B_T = _pack_tokens(order, self.device)
        plan = RowPlan.of(
            [live[r.job].adapter for r in order],
            self.device,
            [image_count(r.datum.pixels) for r in order],
        )
        with torch.set_grad_enabled(backward), self.pool.router.rows(plan):
            pixels = concat_pixels([r.datum.pixels for r in order])
            p_B_T = self.target_logprobs(ids_B_T, targets_B_T, pixels)
            failed: dict[int, InvalidInput] = {}
            total = p_B_T.new_zeros(())
            parts: dict[int, tuple[torch.Tensor, dict[str, torch.Tensor]]] = {}
            for i, (start, stop) in spans.items():
                job = live[i]
                inputs = _inputs(job, order[start:stop], ids_B_T.shape[1], self.device)
                mask = mask_B_T[start:stop]
                loss_R_T = job.spec.fn(p_B_T[start:stop], inputs, job.cfg) * mask
                error = _not_finite(loss_R_T, order[start:stop], job.request.fwd.loss_fn)
                if error is not None:
                    failed[i] = error
                    continue
                parts[i] = (loss_R_T, inputs)
                total = total + loss_R_T.sum()
            if self.before_backward is not None:
                self.before_backward(bool(failed))
            if failed:
                return failed
            if backward:
                total.backward()
        for i, (loss_R_T, inputs) in parts.items():
            job = live[i]
            start, stop = spans[i]
            job.total += float(loss_R_T.detach().sum())
            if job.spec.metrics is not None:
                terms = job.spec.metrics(p_B_T[start:stop].detach(), inputs, job.cfg)
                for name, term_R_T in terms.items():
                    value = float((term_R_T * mask_B_T[start:stop]).sum())
                    job.sums[name] = job.sums.get(name, 0.0) + value
            for row in range(start, stop):
                d = order[row].datum
                job.logprobs[d.index] = p_B_T[row, : d.length].detach().float().cpu().numpy()
                job.losses[d.index] = (
                    loss_R_T[row - start, : d.length].detach().float().cpu().numpy()
                )
        return {}


def micro_batch_count(lengths: Sequence[int], max_tokens: int) -> int:
    """How many micro-batches ``run`` makes of one request with datums of these lengths."""
    rows = [_Row(0, PackedDatum(i, np.zeros(n, dtype=np.int64), {})) for i, n in enumerate(lengths)]
    return len(_group_rows(rows, max_tokens))


def _group_rows(rows: list[_Row], max_tokens: int) -> list[list[_Row]]:
    """Rows (longest first) in groups whose padded size stays within ``max_tokens``."""
    ordered = sorted(rows, key=lambda r: (-r.datum.length, r.job, r.datum.index))
    groups: list[list[_Row]] = []
    for r in ordered:
        if groups and (len(groups[-1]) + 1) * groups[-1][0].datum.length <= max_tokens:
            groups[-1].append(r)
        else:
            groups.append([r])
    return groups


def _pack_tokens(
    rows: list[_Row], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded input ids, target ids and the mask of real positions: padding after a row's
    end never influences its earlier (causal) positions."""
    t = max(r.datum.length for r in rows)
    ids = np.zeros((len(rows), t), dtype=np.int64)
    targets = np.zeros((len(rows), t), dtype=np.int64)
    mask = np.zeros((len(rows), t), dtype=bool)
    for n, r in enumerate(rows):
        ids[n, : r.datum.length] = r.datum.tokens
        targets[n, : r.datum.length] = r.datum.inputs["target_tokens"]
        mask[n, : r.datum.length] = True
    return tuple(torch.from_numpy(a).to(device) for a in (ids, targets, mask))  # type: ignore[return-value]


def _inputs(job: _Job, rows: list[_Row], t: int, device: torch.device) -> dict[str, torch.Tensor]:
    """A request's loss inputs (target tokens aside) for its rows, right-padded with zeros to ``t``."""
    keys = [k for k in job.datums[0].inputs if k != "target_tokens"]
    out = {}
    for k in keys:
        arr = np.zeros((len(rows), t), dtype=job.datums[0].inputs[k].dtype)
        for n, r in enumerate(rows):
            arr[n, : r.datum.length] = r.datum.inputs[k]
        out[k] = torch.from_numpy(arr).to(device)
    return out


def _not_finite(loss_R_T: torch.Tensor, rows: list[_Row], loss_fn: str) -> InvalidInput | None:
    bad = ~torch.isfinite(loss_R_T.detach())
    if not bool(bad.any()):
        return None
    row, col = (int(x) for x in bad.nonzero()[0])
    return InvalidInput(
        f"data[{rows[row].datum.index}]",
        f"{loss_fn} loss is not finite at position {col} (check logprobs and advantages)",
    )


def _restore(params: list[torch.nn.Parameter], saved: list[torch.Tensor | None]) -> None:
    for p, grad in zip(params, saved, strict=True):
        p.grad = grad
