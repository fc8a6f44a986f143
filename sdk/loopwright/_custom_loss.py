"""Client-side custom losses: logprobs from a forward pass, autograd, and the linearised batch.

The server's cross_entropy is ``Σ −logprob·weight``, so weights = −dC/dlogprob make its gradient
equal the gradient of the user's loss C. torch is imported only when this runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .types import Datum, ForwardBackwardOutput, TensorData

__all__ = ["CustomLossFn", "forward_data", "linearize", "with_metrics"]

CustomLossFn = Callable[[list[Datum], list[Any]], tuple[Any, dict[str, float]]]
"""``loss_fn(data, logprobs_list) -> (loss, metrics)``; logprobs_list holds one torch tensor per datum."""

_ALLOWED_INPUTS = {"target_tokens", "weights"}


def _torch() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise ImportError("forward_backward_custom needs torch: pip install torch") from exc
    return torch


def forward_data(data: Sequence[Datum]) -> list[Datum]:
    """The batch for the logprob forward pass: target_tokens, plus zero weights if none given."""
    out: list[Datum] = []
    for index, datum in enumerate(data):
        targets = datum.loss_fn_inputs.get("target_tokens")
        if targets is None:
            raise ValueError(f"datum {index}: forward_backward_custom needs target_tokens")
        extra = sorted(set(datum.loss_fn_inputs) - _ALLOWED_INPUTS)
        if extra:
            raise ValueError(
                f"datum {index}: forward_backward_custom takes only target_tokens and weights, "
                f"got also {extra}"
            )
        if "weights" in datum.loss_fn_inputs:
            out.append(datum)
            continue
        zeros = TensorData(data=[0.0] * len(targets.data), dtype="float32", shape=targets.shape)
        inputs = {"target_tokens": targets, "weights": zeros}
        out.append(Datum(model_input=datum.model_input, loss_fn_inputs=inputs))
    return out


def linearize(
    data: Sequence[Datum], forward: ForwardBackwardOutput, loss_fn: CustomLossFn
) -> tuple[list[Datum], dict[str, float]]:
    """Run the user's loss on the forward pass's logprobs and backpropagate it to them.

    Returns the cross_entropy batch whose weights are −dC/dlogprob, and the user's metrics.
    """
    torch = _torch()
    if len(forward.loss_fn_outputs) != len(data):
        raise ValueError(
            f"forward returned {len(forward.loss_fn_outputs)} outputs for {len(data)} datums"
        )
    logprobs = [
        torch.tensor(out["logprobs"].to_numpy(), dtype=torch.float32).requires_grad_(True)
        for out in forward.loss_fn_outputs
    ]
    loss, metrics = loss_fn(list(data), logprobs)
    loss.backward()
    linear: list[Datum] = []
    for index, (datum, logprob) in enumerate(zip(data, logprobs, strict=True)):
        grad = logprob.grad if logprob.grad is not None else torch.zeros_like(logprob)
        if not torch.isfinite(grad).all():
            raise ValueError(f"datum {index}: the custom loss has a non-finite gradient")
        inputs = {
            "target_tokens": datum.loss_fn_inputs["target_tokens"],
            "weights": TensorData.from_torch(-grad),
        }
        linear.append(Datum(model_input=datum.model_input, loss_fn_inputs=inputs))
    return linear, {key: _scalar(value) for key, value in (metrics or {}).items()}


def _scalar(value: Any) -> float:
    detach = getattr(value, "detach", None)
    return float(detach() if callable(detach) else value)


def with_metrics(output: ForwardBackwardOutput, metrics: dict[str, float]) -> ForwardBackwardOutput:
    """The backward pass's output with the user's metrics added (theirs win on a clash)."""
    return output.model_copy(update={"metrics": {**output.metrics, **metrics}})
