"""A self-contained engine demo: LoRA SFT teaches a base model two-digit addition.

Runs on the embedded default (the SmolLM2-135M base model shipped on PyPI, CPU, no services):
held-out accuracy before, a short SFT run with a progress bar, held-out accuracy after, and a
multi-adapter check that a second session's adapter was untouched.

    python -m workers.engine.demo [--model NAME] [--steps 40] [--batch 8]
"""

from __future__ import annotations

import argparse
import random
import time

from tqdm import tqdm

from loopwright.types import AdamParams, Datum, ForwardBackwardInput, ModelInput

from .adapters import AdapterConfig
from .catalog import DEFAULT_MODEL
from .host import HostConfig, ModelHost
from .sampler import SampleJob


def problems(seed: int, n: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)  # noqa: S311 — the demo's arithmetic problems, not a secret
    return [(rng.randint(10, 99), rng.randint(10, 99)) for _ in range(n)]


def prompt_tokens(host: ModelHost, a: int, b: int) -> list[int]:
    messages = [{"role": "user", "content": f"What is {a} + {b}? Answer with the number only."}]
    return list(
        host.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=False
        )
    )


def sft_datum(host: ModelHost, a: int, b: int) -> Datum:
    """Prompt tokens get weight 0; the answer and end-of-turn get weight 1."""
    prompt = prompt_tokens(host, a, b)
    answer = [
        *host.tokenizer.encode(str(a + b), add_special_tokens=False),
        host.tokenizer.eos_token_id,
    ]
    tokens = prompt + answer
    weights = [0.0] * (len(prompt) - 1) + [1.0] * len(answer)
    return Datum.model_validate(
        {
            "model_input": ModelInput.from_ints(tokens[:-1]),
            "loss_fn_inputs": {"target_tokens": tokens[1:], "weights": weights},
        }
    )


def accuracy(host: ModelHost, model_id: str | None, items: list[tuple[int, int]]) -> float:
    jobs = [
        SampleJob(prompt=prompt_tokens(host, a, b), max_tokens=6, temperature=0.0) for a, b in items
    ]
    results = host.sample(model_id, jobs)
    right = 0
    for (a, b), res in zip(items, results, strict=True):
        text = str(host.tokenizer.decode(res.sequences[0].tokens, skip_special_tokens=True)).strip()
        right += text.split()[0].rstrip(".") == str(a + b) if text else 0
    return right / len(items)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--eval", type=int, default=32, help="held-out problems")
    parser.add_argument("--dtype", default=None, help="float32 (CPU default) or bfloat16")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    host = ModelHost(args.model, HostConfig(dtype=args.dtype))
    print(
        f"base model {args.model}: loaded in {host.load_seconds:.1f}s, context {host.context_length}"
    )
    host.create_adapter("demo", AdapterConfig(rank=args.rank, alpha=2 * args.rank, seed=0))
    host.create_adapter("bystander", AdapterConfig(rank=4, seed=1))
    bystander = {k: p.detach().clone() for k, p in host.pool.parameters("bystander").items()}

    held_out = problems(seed=1, n=args.eval)
    before = accuracy(host, "demo", held_out)
    print(f"held-out accuracy before: {before:.0%}")

    train = problems(seed=0, n=args.steps * args.batch)
    bar = tqdm(range(args.steps), desc="sft", unit="step")
    for step in bar:
        batch = [
            sft_datum(host, a, b) for a, b in train[step * args.batch : (step + 1) * args.batch]
        ]
        out = host.forward_backward(
            "demo", ForwardBackwardInput(data=batch, loss_fn="cross_entropy")
        )
        host.optim_step("demo", AdamParams(learning_rate=args.lr))
        n = sum(float(d.loss_fn_inputs["weights"].to_numpy().sum()) for d in batch)
        bar.set_postfix(loss=f"{out.metrics['loss:sum'] / n:.3f}")

    after = accuracy(host, "demo", held_out)
    print(f"held-out accuracy after {args.steps} steps: {after:.0%}  (before: {before:.0%})")
    unchanged = all(p.equal(bystander[k]) for k, p in host.pool.parameters("bystander").items())
    print(f"second adapter on the same base model untouched: {unchanged}")
    print(f"total {time.perf_counter() - started:.0f}s")


if __name__ == "__main__":
    main()
