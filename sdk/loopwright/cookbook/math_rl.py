"""GRPO on math problems: sample a group of answers per question, reward the exact answer after
``####``, centre the rewards within each group, and train with an RL loss.

    python -m loopwright.cookbook.math_rl --task arithmetic --steps 30
    python -m loopwright.cookbook.math_rl --task gsm --max-tokens 256   # needs reasoning-gym
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from loopwright import SamplingClient
from loopwright.types import AdamParams, Datum, SamplingParams

from .checkpoint import (
    connect,
    save_checkpoint,
    should_eval,
    should_save,
    start_training,
    write_final,
)
from .config import BaseConfig, opt, parse_config, save_config
from .datums import RLSegment, group_relative_advantages, rl_datum, rl_loss, sampled_segment
from .math_tasks import (
    ARITHMETIC_EXAMPLE,
    Problem,
    arithmetic_eval_set,
    arithmetic_train_problems,
    extract_answer,
    gsm_problems,
    math_reward,
    prompt_messages,
)
from .metrics import MetricsLogger
from .renderers import Tokenizer, decode, render_prompt

RECIPE = "math_rl"


@dataclass
class Config(BaseConfig):
    task: str = opt("arithmetic", "arithmetic (built in) or gsm (reasoning-gym gsm_symbolic)")
    max_operand: int = opt(20, "arithmetic: operands are 1..max_operand")
    ops: str = opt("+", "arithmetic: operators to draw from, e.g. '+-*'")
    gsm_train_size: int = opt(2000, "gsm: training problems generated")
    groups_per_step: int = opt(8, "questions per step")
    group_size: int = opt(8, "answers sampled per question")
    max_tokens: int = opt(32, "most tokens per answer")
    temperature: float = opt(1.0, "sampling temperature (1.0 keeps sampler logprobs on-policy)")
    loss_fn: str = opt("importance_sampling", "importance_sampling or ppo")
    normalize_advantages: bool = opt(True, "divide centred rewards by the group's std")
    few_shot: bool = opt(True, "show one worked example before each question")
    eval_size: int = opt(64, "held-out questions (answered greedily)")
    eval_max_tokens: int = opt(0, "most tokens per held-out answer (0: max_tokens)")
    learning_rate: float = opt(2e-4, "AdamW learning rate")


class MathTask:
    """Training and held-out problems of the configured task, and their prompts."""

    def __init__(self, config: Config) -> None:
        self.config = config
        if config.task == "arithmetic":
            self.example: Problem | None = ARITHMETIC_EXAMPLE
            self.eval_problems = arithmetic_eval_set(
                config.eval_size, config.seed, config.max_operand, config.ops
            )
            self._held_out = {p.question for p in self.eval_problems}
        elif config.task == "gsm":
            pool = gsm_problems(config.gsm_train_size + 1, config.seed)
            self.example, self._train = pool[0], pool[1:]
            self._held_out = {p.question for p in pool}
            self.eval_problems = [
                p
                for p in gsm_problems(config.eval_size * 2, config.seed + 10_000)
                if p.question not in self._held_out
            ][: config.eval_size]
        else:
            raise SystemExit(f"unknown task {config.task!r}: arithmetic or gsm")
        if not config.few_shot:
            self.example = None

    def train_problems(self, step: int) -> list[Problem]:
        """The questions of ``step``: a function of seed and step, so resume sees the same."""
        c = self.config
        if c.task == "arithmetic":
            return arithmetic_train_problems(
                step, c.groups_per_step, c.seed, self._held_out, c.max_operand, c.ops
            )
        rng = random.Random(f"gsm-train:{c.seed}:{step}")
        return rng.sample(self._train, c.groups_per_step)

    def prompt(self, tokenizer: Tokenizer, problem: Problem) -> list[int]:
        return render_prompt(tokenizer, prompt_messages(problem, self.example))


def evaluate(
    sampler: SamplingClient,
    tokenizer: Tokenizer,
    task: MathTask,
    max_tokens: int,
) -> dict[str, float]:
    """Held-out accuracy with greedy answers (all requests sent before any is awaited)."""
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0)
    futures = [
        sampler.sample(task.prompt(tokenizer, p), num_samples=1, sampling_params=params)
        for p in task.eval_problems
    ]
    correct, formatted = 0.0, 0
    for problem, future in zip(task.eval_problems, futures, strict=True):
        text = decode(tokenizer, future.result().sequences[0].tokens)
        correct += math_reward(text, problem.answer)
        formatted += extract_answer(text) is not None
    n = max(len(task.eval_problems), 1)
    return {"eval/accuracy": correct / n, "eval/format_rate": formatted / n}


def rollout_step(
    sampler: SamplingClient,
    tokenizer: Tokenizer,
    task: MathTask,
    problems: Sequence[Problem],
    config: Config,
) -> tuple[list[Datum], dict[str, float]]:
    """Sample a group per question, score it here, and build the step's datums."""
    params = SamplingParams(max_tokens=config.max_tokens, temperature=config.temperature, seed=None)
    prompts = [task.prompt(tokenizer, p) for p in problems]
    futures = [
        sampler.sample(prompt, num_samples=config.group_size, sampling_params=params)
        for prompt in prompts
    ]
    datums: list[Datum] = []
    rewards_all: list[float] = []
    lengths: list[int] = []
    formatted = 0
    groups_with_signal = 0
    for problem, prompt, future in zip(problems, prompts, futures, strict=True):
        sequences = future.result().sequences
        texts = [decode(tokenizer, s.tokens) for s in sequences]
        rewards = [math_reward(t, problem.answer) for t in texts]
        formatted += sum(extract_answer(t) is not None for t in texts)
        rewards_all += rewards
        lengths += [len(s.tokens) for s in sequences]
        advantages = group_relative_advantages(rewards, config.normalize_advantages)
        if not any(advantages):
            continue  # every answer scored the same: no signal in this group
        groups_with_signal += 1
        for seq, advantage in zip(sequences, advantages, strict=True):
            datums.append(
                rl_datum([RLSegment(prompt), sampled_segment(seq.tokens, seq.logprobs, advantage)])
            )
    metrics = {
        "train/reward_mean": float(np.mean(rewards_all)),
        "train/format_rate": formatted / max(len(rewards_all), 1),
        "train/groups_with_signal": groups_with_signal / max(len(problems), 1),
        "train/sample_tokens_mean": float(np.mean(lengths)),
    }
    return datums, metrics


def main(config: Config) -> dict[str, float]:
    rl_loss(config.loss_fn)  # a bad name fails here, before any session starts
    save_config(config, RECIPE)
    task = MathTask(config)
    eval_tokens = config.eval_max_tokens or config.max_tokens
    with connect(config) as service:
        training_client, resumed = start_training(service, config, f"{RECIPE}-{config.task}")
        start = resumed.step if resumed else 0
        tokenizer = training_client.get_tokenizer()
        sampler = training_client.save_weights_and_get_sampling_client()
        first_eval: dict[str, float] = dict(resumed.extra.get("first_eval", {})) if resumed else {}
        last_eval: dict[str, float] = {}
        logger = MetricsLogger(
            config.log_dir,
            total_steps=config.steps,
            start_step=start,
            params=config.to_dict(),
            desc=RECIPE,
            summary_keys=("train/reward_mean", "eval/accuracy"),
        )
        with logger:
            for step in range(start, config.steps):
                if should_eval(config, step):
                    last_eval = evaluate(sampler, tokenizer, task, eval_tokens)
                    first_eval = first_eval or last_eval
                    logger.log(step, last_eval, advance=False)
                started = time.monotonic()
                datums, metrics = rollout_step(
                    sampler, tokenizer, task, task.train_problems(step), config
                )
                if datums:
                    fwd_bwd = training_client.forward_backward(datums, rl_loss(config.loss_fn))
                    optim = training_client.optim_step(
                        AdamParams(learning_rate=config.learning_rate_at(step))
                    )
                    metrics["train/loss"] = fwd_bwd.result().metrics.get("loss:sum", 0.0)
                    optim.result()
                # the sampler follows the weights after every step, as the loop is on-policy
                sampler = training_client.save_weights_and_get_sampling_client()
                metrics["train/datums"] = len(datums)
                metrics["time/step_s"] = time.monotonic() - started
                logger.log(step, metrics)
                if should_save(config, step + 1):
                    save_checkpoint(
                        training_client, config.log_dir, step + 1, {"first_eval": first_eval}
                    )
            last_eval = evaluate(sampler, tokenizer, task, eval_tokens)
            logger.log(config.steps, last_eval, advance=False)
        final_sampler = training_client.save_weights_for_sampler("final").result().path
        summary = {
            "eval/accuracy_before": first_eval.get("eval/accuracy", float("nan")),
            "eval/accuracy_after": last_eval["eval/accuracy"],
        }
        write_final(config.log_dir, {"sampler_path": final_sampler, **summary})
        print(
            f"held-out accuracy {summary['eval/accuracy_before']:.3f} -> "
            f"{summary['eval/accuracy_after']:.3f}; sampler weights: {final_sampler}",
            file=sys.stderr,
        )
        return summary


if __name__ == "__main__":
    main(parse_config(Config, RECIPE, description=__doc__))
