"""End-to-end learning on the tiny model: SFT memorises a small set, RL raises a toy reward."""

from __future__ import annotations

import numpy as np

from loopwright.types import AdamParams, Datum, ForwardBackwardInput, ModelInput, SamplingParams
from workers.engine.adapters import AdapterConfig
from workers.engine.sampler import SampleJob

TEXTS = ["the cat sat on the mat.", "loopwright trains.", "2 + 2 = 4", "hello, world!"]


def sft_datum(tokenizer, text: str) -> Datum:
    """Next-token targets; the first target (which text follows <s>) is left out of the loss."""
    tokens = [
        tokenizer.bos_token_id,
        *tokenizer.encode(text, add_special_tokens=False),
        tokenizer.eos_token_id,
    ]
    weights = [0.0] + [1.0] * (len(tokens) - 2)
    return Datum(
        model_input=ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": weights},
    )


def test_sft_drives_loss_near_zero(host) -> None:
    host.create_adapter("m", AdapterConfig(rank=16, alpha=32, seed=0))
    data = [sft_datum(host.tokenizer, t) for t in TEXTS]
    n_tokens = sum(float(d.loss_fn_inputs["weights"].to_numpy().sum()) for d in data)
    losses = []
    for _ in range(150):
        out = host.forward_backward("m", ForwardBackwardInput(data=data, loss_fn="cross_entropy"))
        host.optim_step("m", AdamParams(learning_rate=3e-3, grad_clip_norm=1.0))
        losses.append(out.metrics["loss:sum"] / n_tokens)
    assert losses[0] > 4.0  # ≈ ln(259) for the random model
    assert max(losses[-5:]) < 0.05, losses[-10:]
    # and the model now completes a memorised prompt greedily
    prompt = [
        host.tokenizer.bos_token_id,
        *host.tokenizer.encode("loopwright", add_special_tokens=False),
    ]
    (res,) = host.sample("m", [SampleJob(prompt=prompt, max_tokens=20, temperature=0.0)])
    assert host.tokenizer.decode(res.sequences[0].tokens, skip_special_tokens=True) == " trains."


def test_importance_sampling_raises_a_toy_reward(host) -> None:
    """Reward: the share of sampled bytes that are vowels. Group-centred advantages, IS loss."""
    host.create_adapter("m", AdapterConfig(rank=8, seed=0))
    vowels = set(b"aeiou")
    prompt = host.tokenizer.encode("say:", add_special_tokens=False)
    rewards_per_step = []
    for step in range(12):
        (res,) = host.sample(
            "m", [SampleJob.from_wire(prompt, 16, SamplingParams(max_tokens=8, seed=step, stop=[]))]
        )
        rewards = np.array([np.mean([t in vowels for t in s.tokens]) for s in res.sequences])
        rewards_per_step.append(rewards.mean())
        adv = rewards - rewards.mean()
        data = []
        for seq, a in zip(res.sequences, adv, strict=True):
            full = prompt + seq.tokens
            n_prompt = len(prompt) - 1
            data.append(
                Datum(
                    model_input=ModelInput.from_ints(full[:-1]),
                    loss_fn_inputs={
                        "target_tokens": full[1:],
                        "logprobs": [0.0] * n_prompt + seq.logprobs,
                        "advantages": [0.0] * n_prompt + [float(a)] * len(seq.tokens),
                    },
                )
            )
        host.forward_backward("m", ForwardBackwardInput(data=data, loss_fn="importance_sampling"))
        host.optim_step("m", AdamParams(learning_rate=2e-2))
    early, late = np.mean(rewards_per_step[:3]), np.mean(rewards_per_step[-3:])
    assert late > early + 0.3, rewards_per_step
