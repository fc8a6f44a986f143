"""The seeded training loop of the fault tests, in pieces that need only our SDK (the multi-host
test runs it in a process of the client host's): 16 datums of 96 tokens per step, and every
fourth step a state save and a seeded sample of saved weights."""

from __future__ import annotations

from pathlib import Path

from loopwright import ServiceClient, TrainingClient
from loopwright.types import AdamParams, Datum, ForwardBackwardOutput, ModelInput, SamplingParams

STEPS = 8


def batch(step: int) -> list[Datum]:
    """16 datums of 96 tokens."""
    data = []
    for row in range(16):
        tokens = [(step * 31 + row * 17 + i * 7) % 250 for i in range(97)]
        data.append(
            Datum(
                model_input=ModelInput.from_ints(tokens[:-1]),
                loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * 96},
            )
        )
    return data


def no_fault(*args, **kwargs) -> None:
    return None


def train_step(
    tc: TrainingClient, step: int, at=no_fault
) -> tuple[ForwardBackwardOutput, list[list[int]] | None]:
    """One step: forward_backward (cross entropy), optim_step (AdamW, 5e-3), and every fourth
    step a save and samples (returned); ``at(point, step, kind=…)`` is called at each point,
    before what it names is sent."""
    at("forward_backward", step, kind="forward_backward")
    out = tc.forward_backward(batch(step), "cross_entropy").result()
    at("between", step)
    tc.optim_step(AdamParams(learning_rate=5e-3)).result()
    return out, save_and_sample(tc, step, at) if step % 4 == 3 else None


def save_and_sample(tc: TrainingClient, step: int, at=no_fault) -> list[list[int]]:
    """A state save, then 4 seeded samples of 64 tokens from weights saved for sampling;
    ``at(point, step, kind=…, sampler=…)`` is called before each is sent."""
    at("save", step, kind="save_weights")
    tc.save_state(f"s{step}").result()
    sampler = tc.save_weights_and_get_sampling_client(f"w{step}")
    params = SamplingParams(max_tokens=64, seed=step, stop=[])
    at("sample", step, kind="sample", sampler=sampler.sampling_session_id)
    out = sampler.sample(ModelInput.from_ints([1, 2, 3, 4]), num_samples=4, sampling_params=params)
    return [s.tokens for s in out.result().sequences]


def download_final(svc: ServiceClient, tc: TrainingClient, folder: Path) -> Path:
    """The final state (adapter and AdamW state), saved and downloaded into ``folder``."""
    final = tc.save_state("final").result().path
    return svc.download_model_package(final, folder, include_optimizer=True)
