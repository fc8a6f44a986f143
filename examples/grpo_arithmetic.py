"""The example RL loop (GRPO with the ppo loss) against a running Loopwright.

Start the service first (`make serve`), export the two variables it prints, then:

    python examples/grpo_arithmetic.py [--base-model NAME] [--steps 10]

Each step samples K answers per question from the current weights, scores them here on your
machine, turns the scores into centred advantages and sends one forward_backward + optim_step;
then it refreshes the sampler with the new weights.
"""

from __future__ import annotations

import argparse
import random
import re

import numpy as np

from loopwright import ServiceClient
from loopwright.types import AdamParams, Datum, ModelInput, SamplingParams


def extract_answer(text: str) -> str:
    """The last whole number in the answer ("7 + 5 = 12" -> "12")."""
    numbers = re.findall(r"-?\d+", text)
    return numbers[-1] if numbers else ""


def compute_reward(response_text: str, ground_truth: int) -> float:
    return 1.0 if extract_answer(response_text) == str(ground_truth) else 0.0


def compute_advantages(rewards: list[float]) -> np.ndarray:
    r = np.array(rewards)
    return (r - r.mean()) / (r.std() + 1e-8)  # GRPO baseline: centre within the group


def build_training_datum(prompt: list[int], seq, advantage: float) -> Datum:
    """The prompt is context only: zero advantage keeps it out of the loss."""
    tokens = prompt + seq.tokens
    n = len(prompt) - 1
    return Datum(
        model_input=ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": tokens[1:],
            "logprobs": [0.0] * n + list(seq.logprobs),
            "advantages": [0.0] * n + [float(advantage)] * len(seq.tokens),
        },
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base-model", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--prompts-per-step", type=int, default=4)
    p.add_argument("--k", type=int, default=8, help="samples per question")
    p.add_argument("--lr", type=float, default=1e-4)
    args = p.parse_args()
    rng = random.Random(0)

    svc = ServiceClient()  # LOOPWRIGHT_BASE_URL, _API_KEY and _ROLE_ARN from the environment
    print("base models:", [m.name for m in svc.list_base_models()])
    with svc:
        training_client = svc.create_lora_training_client(
            args.base_model, training_session_name="grpo-arithmetic", rank=16, alpha=32
        )
        tokenizer = training_client.get_tokenizer()
        sampling_client = training_client.create_sampling_client()

        def build_prompt(a: int, b: int) -> list[int]:
            messages = [
                {"role": "user", "content": f"What is {a} + {b}? Answer with the number only."}
            ]
            return list(
                tokenizer.apply_chat_template(
                    messages, add_generation_prompt=True, tokenize=True, return_dict=False
                )
            )

        for step in range(args.steps):
            datums, pending, all_rewards = [], [], []
            for _ in range(args.prompts_per_step):
                a, b = rng.randint(1, 20), rng.randint(1, 20)
                prompt = build_prompt(a, b)
                pending.append(
                    (
                        prompt,
                        a + b,
                        sampling_client.sample(
                            ModelInput.from_ints(prompt),
                            num_samples=args.k,
                            sampling_params=SamplingParams(
                                max_tokens=24, temperature=0.7, top_p=0.9
                            ),
                        ),
                    )
                )
            for prompt, truth, future in pending:  # all requests were sent before any is awaited
                result = future.result()
                rewards = [
                    compute_reward(tokenizer.decode(s.tokens, skip_special_tokens=True), truth)
                    for s in result.sequences
                ]
                all_rewards += rewards
                advantages = compute_advantages(rewards)
                datums += [
                    build_training_datum(prompt, s, a)
                    for s, a in zip(result.sequences, advantages, strict=True)
                ]
            fwd_bwd_op = training_client.forward_backward(datums, loss_fn="ppo")
            optim_op = training_client.optim_step(
                AdamParams(learning_rate=args.lr)
            )  # sent before fwd_bwd finishes
            fwd_bwd_op.result(), optim_op.result()
            sampling_client = training_client.save_weights_and_get_sampling_client()
            print(f"step {step}: mean reward {np.mean(all_rewards):.2f}")

        print(
            "sampler checkpoint:", training_client.save_weights_for_sampler("final").result().path
        )
        print("training state:", training_client.save_state("final").result().path)


if __name__ == "__main__":
    main()
