"""Preference optimisation with custom losses: DPO on (chosen, rejected) pairs, or KTO on
unpaired binary feedback. The reference is the starting policy, saved as sampler weights and
scored with ``compute_logprobs``; held-out pairs measure how often chosen beats rejected.

    python -m loopwright.cookbook.preference --method dpo --steps 20
    python -m loopwright.cookbook.preference --method kto --feedback feedback.jsonl
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from loopwright import SamplingClient, TrainingClient
from loopwright.types import AdamParams, Datum

from .checkpoint import (
    connect,
    save_checkpoint,
    should_eval,
    should_save,
    start_training,
    write_final,
)
from .config import BaseConfig, opt, parse_config, save_config
from .datagen import data_path, read_jsonl
from .datums import sequence_datum
from .metrics import MetricsLogger
from .preference_losses import dpo_loss, kto_loss, sequence_logprob
from .renderers import Message, Tokenizer, render_conversation
from .sft import split

RECIPE = "preference"


@dataclass
class Config(BaseConfig):
    method: str = opt("dpo", "dpo (pairs) or kto (binary feedback)")
    pairs: str = opt("preference_pairs.jsonl", "JSONL of {prompt, chosen, rejected}")
    feedback: str = opt("feedback.jsonl", "kto: JSONL of {prompt, completion, label}")
    eval_fraction: float = opt(0.15, "share of the pairs held out for evaluation")
    batch_size: int = opt(8, "pairs (dpo) or examples (kto) per step")
    beta: float = opt(0.1, "strength of the pull towards the reference")
    desirable_weight: float = opt(1.0, "kto: weight of desirable examples")
    undesirable_weight: float = opt(1.0, "kto: weight of undesirable examples")
    learning_rate: float = opt(1e-4, "AdamW learning rate")


@dataclass
class Example:
    """One rendered completion with the tokens to score, and its reference logprob once known."""

    datum: Datum
    tokens: list[int]
    weights: list[float]
    reference: float | None = None


def _render(tokenizer: Tokenizer, prompt: list[Message], completion: str) -> Example:
    messages = [*prompt, {"role": "assistant", "content": completion}]
    rendered = render_conversation(tokenizer, messages, "last_assistant")
    return Example(
        sequence_datum(rendered.tokens, rendered.weights), rendered.tokens, rendered.weights
    )


def fill_reference(reference: SamplingClient, examples: Sequence[Example]) -> None:
    """Score the examples that lack it under the reference (all requests sent first)."""
    todo = [e for e in examples if e.reference is None]
    futures = [reference.compute_logprobs(e.tokens) for e in todo]
    for example, future in zip(todo, futures, strict=True):
        # position i of the prompt logprobs scores token i, i.e. target i - 1
        example.reference = sequence_logprob(future.result()[1:], example.weights[1:])


def evaluate(
    client: TrainingClient, pairs: Sequence[tuple[Example, Example]], beta: float
) -> dict[str, float]:
    """How often the implicit reward prefers chosen over rejected on held-out pairs."""
    flat = [e for pair in pairs for e in pair]
    out = client.forward([e.datum for e in flat], "cross_entropy").result()
    policy, ratios = [], []
    for example, result in zip(flat, out.loss_fn_outputs, strict=True):
        policy.append(sequence_logprob(result["logprobs"].tolist(), example.weights[1:]))
        ratios.append(policy[-1] - float(example.reference or 0.0))
    margins = beta * (np.array(ratios[0::2]) - np.array(ratios[1::2]))
    likelier = np.array(policy[0::2]) - np.array(policy[1::2])
    return {
        # a tie (the policy still equals the reference, up to numerics) counts as half right
        "eval/pair_accuracy": float(np.mean(np.where(np.abs(margins) < 1e-3, 0.5, margins > 0))),
        "eval/margin": float(np.mean(margins)),
        "eval/chosen_likelier": float(np.mean(likelier > 0)),
    }


def _batch(items: Sequence[Any], step: int, size: int, seed: int) -> list[Any]:
    rng = random.Random(f"{seed}:{step}")
    return rng.sample(list(items), min(size, len(items)))


def main(config: Config) -> dict[str, float]:
    if config.method not in ("dpo", "kto"):
        raise SystemExit(f"unknown method {config.method!r}: dpo or kto")
    save_config(config, RECIPE)
    pair_records, eval_records = split(
        read_jsonl(data_path(config.pairs)), config.eval_fraction, config.seed
    )
    with connect(config) as service:
        client, resumed = start_training(service, config, f"{RECIPE}-{config.method}")
        start = resumed.step if resumed else 0
        tokenizer = client.get_tokenizer()
        if resumed and "reference_path" in resumed.extra:
            reference_path = str(resumed.extra["reference_path"])
        else:  # the policy before any step is the reference
            reference_path = client.save_weights_for_sampler("reference").result().path
        reference = client.create_sampling_client(reference_path)

        def pair(r: dict[str, Any]) -> tuple[Example, Example]:
            return _render(tokenizer, r["prompt"], r["chosen"]), _render(
                tokenizer, r["prompt"], r["rejected"]
            )

        eval_pairs = [pair(r) for r in eval_records]
        fill_reference(reference, [e for p in eval_pairs for e in p])
        if config.method == "dpo":
            train: list[Any] = [pair(r) for r in pair_records]
        else:
            feedback = read_jsonl(data_path(config.feedback))
            train = [
                (_render(tokenizer, r["prompt"], r["completion"]), bool(r["label"]))
                for r in feedback
            ]
        first_eval: dict[str, float] = dict(resumed.extra.get("first_eval", {})) if resumed else {}
        last_eval: dict[str, float] = {}
        logger = MetricsLogger(
            config.log_dir,
            total_steps=config.steps,
            start_step=start,
            params=config.to_dict(),
            desc=f"{RECIPE}-{config.method}",
            summary_keys=(f"{config.method}/loss", "eval/pair_accuracy"),
        )
        with logger:
            for step in range(start, config.steps):
                if should_eval(config, step):
                    last_eval = evaluate(client, eval_pairs, config.beta)
                    first_eval = first_eval or last_eval
                    logger.log(step, last_eval, advance=False)
                started = time.monotonic()
                batch = _batch(train, step, config.batch_size, config.seed)
                if config.method == "dpo":
                    examples = [e for p in batch for e in p]
                    fill_reference(reference, examples)
                    loss_fn = dpo_loss([float(e.reference or 0.0) for e in examples], config.beta)
                else:
                    examples = [e for e, _ in batch]
                    fill_reference(reference, examples)
                    loss_fn = kto_loss(
                        [float(e.reference or 0.0) for e in examples],
                        [label for _, label in batch],
                        config.beta,
                        config.desirable_weight,
                        config.undesirable_weight,
                    )
                # blocks for the forward pass, runs the loss here, sends the backward pass
                fwd_bwd = client.forward_backward_custom([e.datum for e in examples], loss_fn)
                optim = client.optim_step(AdamParams(learning_rate=config.learning_rate_at(step)))
                metrics = {
                    k: v for k, v in fwd_bwd.result().metrics.items() if "/" in k
                }  # the loss function's own metrics
                optim.result()
                metrics["time/step_s"] = time.monotonic() - started
                logger.log(step, metrics)
                if should_save(config, step + 1):
                    extra = {"first_eval": first_eval, "reference_path": reference_path}
                    save_checkpoint(client, config.log_dir, step + 1, extra)
            last_eval = evaluate(client, eval_pairs, config.beta)
            logger.log(config.steps, last_eval, advance=False)
        sampler_path = client.save_weights_for_sampler("final").result().path
        summary = {
            "eval/pair_accuracy_before": first_eval.get("eval/pair_accuracy", float("nan")),
            "eval/pair_accuracy_after": last_eval["eval/pair_accuracy"],
            "eval/margin_after": last_eval["eval/margin"],
            "eval/chosen_likelier_before": first_eval.get("eval/chosen_likelier", float("nan")),
            "eval/chosen_likelier_after": last_eval["eval/chosen_likelier"],
        }
        write_final(config.log_dir, {"sampler_path": sampler_path, **summary})
        print(f"held-out pairs: {summary}; sampler weights: {sampler_path}", file=sys.stderr)
        return summary


if __name__ == "__main__":
    main(parse_config(Config, RECIPE, description=__doc__))
