"""On-policy distillation: the student samples, the teacher scores the student's tokens with
``compute_logprobs``, and each token's advantage is teacher logprob − student logprob (the
negative reverse KL), trained with the importance_sampling loss.

    python -m loopwright.cookbook.distill --teacher-path tinker://<model>/sampler_weights/final
    python -m loopwright.cookbook.distill --teacher-model <a bigger base model with the tokenizer>
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from loopwright import SamplingClient, ServiceClient
from loopwright.types import AdamParams, Datum, SamplingParams

from .checkpoint import (
    connect,
    finish_run,
    save_checkpoint,
    should_eval,
    should_save,
    start_training,
)
from .config import BaseConfig, opt, parse_config, save_config
from .datagen import data_path, read_jsonl
from .datums import RLSegment, rl_datum, rl_loss, sampled_segment
from .math_tasks import (
    Problem,
    arithmetic_eval_set,
    arithmetic_train_problems,
    math_reward,
    prompt_messages,
)
from .metrics import MetricsLogger
from .renderers import Message, Tokenizer, decode, render_prompt

RECIPE = "distill"


@dataclass
class Config(BaseConfig):
    teacher_path: str = opt("", "teacher: sampler weights (tinker://...) or a model package ARN")
    teacher_model: str = opt("", "teacher: a base model (when no --teacher-path; default --model)")
    prompts: str = opt("arithmetic", "arithmetic, or a JSONL of {'messages': [...]} conversations")
    max_operand: int = opt(20, "arithmetic: operands are 1..max_operand")
    groups_per_step: int = opt(8, "prompts per step")
    group_size: int = opt(4, "student samples per prompt")
    max_tokens: int = opt(24, "most tokens per sample")
    kl_coef: float = opt(1.0, "scale of the per-token advantage teacher_lp - student_lp")
    loss_fn: str = opt("importance_sampling", "importance_sampling or ppo")
    eval_size: int = opt(32, "held-out prompts")
    learning_rate: float = opt(1e-3, "AdamW learning rate")


class Prompts:
    """Training and held-out prompts; arithmetic ones also carry an answer to check."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.eval: list[tuple[list[Message], str | None]]
        if config.prompts == "arithmetic":
            problems = arithmetic_eval_set(config.eval_size, config.seed, config.max_operand)
            self._held_out = {p.question for p in problems}
            self.eval = [(prompt_messages(p, None), p.answer) for p in problems]
            self._pool: list[list[Message]] = []
        else:
            chats = [r["messages"] for r in read_jsonl(data_path(config.prompts))]
            prompts = [_prompt_of(m) for m in chats]
            random.Random(f"split:{config.seed}").shuffle(prompts)
            self.eval = [(p, None) for p in prompts[: config.eval_size]]
            self._pool = prompts[config.eval_size :]

    def train(self, step: int) -> list[list[Message]]:
        c = self.config
        if c.prompts == "arithmetic":
            problems: list[Problem] = arithmetic_train_problems(
                step, c.groups_per_step, c.seed, self._held_out, c.max_operand
            )
            return [prompt_messages(p, None) for p in problems]
        return random.Random(f"{c.seed}:{step}").sample(self._pool, c.groups_per_step)


def _prompt_of(messages: list[Message]) -> list[Message]:
    """The conversation up to its last assistant turn (that turn is the student's to write)."""
    last = max(
        (i for i, m in enumerate(messages) if m["role"] == "assistant"), default=len(messages)
    )
    return messages[:last]


def score_samples(
    student: SamplingClient,
    teacher: SamplingClient,
    prompts: Sequence[list[int]],
    num_samples: int,
    params: SamplingParams,
) -> list[tuple[list[int], list[list[int]], list[list[float]], list[list[float]]]]:
    """Per prompt: (prompt, sampled tokens, student logprobs, teacher logprobs) of each sample.

    Every sample request is sent before any is awaited, then every teacher request likewise.
    """
    futures = [student.sample(p, num_samples=num_samples, sampling_params=params) for p in prompts]
    groups = [(p, f.result().sequences) for p, f in zip(prompts, futures, strict=True)]
    teacher_futures = [
        [teacher.compute_logprobs(prompt + s.tokens) for s in seqs] for prompt, seqs in groups
    ]
    out = []
    for (prompt, seqs), tf in zip(groups, teacher_futures, strict=True):
        teacher_lps = [[float(x or 0.0) for x in f.result()[len(prompt) :]] for f in tf]
        out.append(
            (prompt, [s.tokens for s in seqs], [list(s.logprobs or []) for s in seqs], teacher_lps)
        )
    return out


def evaluate(
    student: SamplingClient,
    teacher: SamplingClient,
    tokenizer: Tokenizer,
    prompts: Prompts,
    config: Config,
) -> dict[str, float]:
    """Held-out reverse KL per token (one sample per prompt), and accuracy for arithmetic."""
    rendered = [render_prompt(tokenizer, m) for m, _ in prompts.eval]
    params = SamplingParams(max_tokens=config.max_tokens, temperature=1.0)
    scored = score_samples(student, teacher, rendered, 1, params)
    gaps = [s - t for _, _, sl, tl in scored for s, t in zip(sl[0], tl[0], strict=True)]
    metrics = {"eval/reverse_kl": float(np.mean(gaps)) if gaps else 0.0}
    answers = [a for _, a in prompts.eval]
    if all(a is not None for a in answers):
        greedy = SamplingParams(max_tokens=config.max_tokens, temperature=0.0)
        futures = [student.sample(p, num_samples=1, sampling_params=greedy) for p in rendered]
        correct = [
            math_reward(decode(tokenizer, f.result().sequences[0].tokens), str(a))
            for f, a in zip(futures, answers, strict=True)
        ]
        metrics["eval/accuracy"] = float(np.mean(correct))
    return metrics


def _teacher(service: ServiceClient, config: Config) -> SamplingClient:
    if config.teacher_path:
        return service.create_sampling_client(model_path=config.teacher_path)
    return service.create_sampling_client(base_model=config.teacher_model or config.model)


def main(config: Config) -> dict[str, float]:
    rl_loss(config.loss_fn)  # a bad name fails here, before any session starts
    save_config(config, RECIPE)
    prompts = Prompts(config)
    params = SamplingParams(max_tokens=config.max_tokens, temperature=1.0)
    with connect(config) as service:
        client, resumed = start_training(service, config, RECIPE)
        start = resumed.step if resumed else 0
        tokenizer = client.get_tokenizer()
        teacher = _teacher(service, config)
        student = client.save_weights_and_get_sampling_client()
        first_eval: dict[str, float] = dict(resumed.extra.get("first_eval", {})) if resumed else {}
        last_eval: dict[str, float] = {}
        logger = MetricsLogger(
            config.log_dir,
            total_steps=config.steps,
            start_step=start,
            params=config.to_dict(),
            desc=RECIPE,
            summary_keys=("train/reverse_kl", "eval/reverse_kl"),
        )
        with logger:
            for step in range(start, config.steps):
                if should_eval(config, step):
                    last_eval = evaluate(student, teacher, tokenizer, prompts, config)
                    first_eval = first_eval or last_eval
                    logger.log(step, last_eval, advance=False)
                started = time.monotonic()
                rendered = [render_prompt(tokenizer, m) for m in prompts.train(step)]
                scored = score_samples(student, teacher, rendered, config.group_size, params)
                datums: list[Datum] = []
                gaps: list[float] = []
                for prompt, samples, student_lps, teacher_lps in scored:
                    for tokens, slp, tlp in zip(samples, student_lps, teacher_lps, strict=True):
                        advantages = [
                            config.kl_coef * (t - s) for s, t in zip(slp, tlp, strict=True)
                        ]
                        gaps += [s - t for s, t in zip(slp, tlp, strict=True)]
                        datums.append(
                            rl_datum([RLSegment(prompt), sampled_segment(tokens, slp, advantages)])
                        )
                fwd_bwd = client.forward_backward(datums, rl_loss(config.loss_fn))
                optim = client.optim_step(AdamParams(learning_rate=config.learning_rate_at(step)))
                loss = fwd_bwd.result().metrics.get("loss:sum", 0.0)
                optim.result()
                student = client.save_weights_and_get_sampling_client()
                logger.log(
                    step,
                    {
                        "train/reverse_kl": float(np.mean(gaps)) if gaps else 0.0,
                        "train/loss": loss,
                        "train/sample_tokens": len(gaps),
                        "time/step_s": time.monotonic() - started,
                    },
                )
                if should_save(config, step + 1):
                    save_checkpoint(client, config.log_dir, step + 1, {"first_eval": first_eval})
            last_eval = evaluate(student, teacher, tokenizer, prompts, config)
            logger.log(config.steps, last_eval, advance=False)
        return finish_run(client, config.log_dir, first_eval, last_eval)


if __name__ == "__main__":
    main(parse_config(Config, RECIPE, description=__doc__))
