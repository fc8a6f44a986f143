"""Code RL: the model writes a Python function, the unit tests run in a local sandbox (reward 1
if all pass, 0 otherwise, -0.1 without a code block), optionally after a check_solution turn.

Sampling and training overlap: rollout workers keep sampling from the newest sampler while the
trainer streams forward_backward over groups as they finish; a group sampled by a policy more
than ``--max-steps-off-policy`` updates old is requeued and sampled again.

    python -m loopwright.cookbook.code_rl --steps 10 --max-steps-off-policy 1
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

import numpy as np

from loopwright import APIFuture, SamplingClient, TrainingClient
from loopwright.types import AdamParams, Datum, ForwardBackwardOutput, SamplingParams

from .checkpoint import (
    connect,
    finish_run,
    save_checkpoint,
    should_eval,
    should_save,
    start_training,
)
from .code_tasks import CodeProblem, GroupResult, load_problems, rollout_group
from .config import BaseConfig, opt, parse_config, save_config
from .datums import group_relative_advantages, rl_loss
from .metrics import MetricsLogger
from .renderers import Tokenizer
from .sandbox import SandboxLimits
from .sft import split

RECIPE = "code_rl"


@dataclass
class Config(BaseConfig):
    problems: str = opt("code_problems.jsonl", "JSONL of {id, prompt, tests, public_tests}")
    eval_fraction: float = opt(0.25, "share of problems held out")
    groups_per_step: int = opt(4, "problems per optimizer step")
    group_size: int = opt(4, "answers per problem")
    substep_groups: int = opt(2, "groups per streamed forward_backward")
    max_steps_off_policy: int = opt(1, "staleness bound k: groups from older policies are stale")
    stale_policy: str = opt("requeue", "requeue (sample the problem again) or drop stale groups")
    num_rollout_workers: int = opt(4, "groups sampled and graded concurrently")
    max_tokens: int = opt(192, "most tokens per turn")
    temperature: float = opt(1.0, "sampling temperature")
    two_turn: bool = opt(True, "let the model revise after the check_solution tool")
    loss_fn: str = opt(
        "importance_sampling", "importance_sampling or ppo (both correct for staleness)"
    )
    timeout_s: float = opt(10.0, "sandbox wall-clock limit per run")
    cpu_s: int = opt(5, "sandbox CPU-time limit")
    memory_mb: int = opt(512, "sandbox memory limit")
    learning_rate: float = opt(1e-4, "AdamW learning rate")
    steps: int = opt(10, "optimizer steps")


class ProblemStream:
    """Training problems in a seeded shuffled cycle; requeued ones come back first."""

    def __init__(self, problems: list[CodeProblem], seed: int, cursor: int = 0) -> None:
        self.problems, self.seed, self.cursor = problems, seed, cursor
        self.requeued: deque[CodeProblem] = deque()

    def next(self) -> CodeProblem:
        if self.requeued:
            return self.requeued.popleft()
        epoch, offset = divmod(self.cursor, len(self.problems))
        order = list(range(len(self.problems)))
        random.Random(f"problems:{self.seed}:{epoch}").shuffle(order)
        self.cursor += 1
        return self.problems[order[offset]]


def evaluate(
    sampler: SamplingClient, tokenizer: Tokenizer, problems: list[CodeProblem], config: Config
) -> dict[str, float]:
    """Held-out pass rate: one greedy answer per problem (with the tool turn if enabled)."""
    params = SamplingParams(max_tokens=config.max_tokens, temperature=0.0)
    limits = _limits(config)
    with ThreadPoolExecutor(config.num_rollout_workers) as pool:
        futures = [
            pool.submit(
                rollout_group,
                sampler,
                tokenizer,
                p,
                version=0,
                group_size=1,
                params=params,
                two_turn=config.two_turn,
                limits=limits,
            )
            for p in problems
        ]
        rollouts = [f.result().rollouts[0] for f in futures]
    return {
        "eval/pass_rate": float(np.mean([r.passed for r in rollouts])),
        "eval/code_block_rate": float(np.mean([r.has_code for r in rollouts])),
    }


def _limits(config: Config) -> SandboxLimits:
    return SandboxLimits(timeout_s=config.timeout_s, cpu_s=config.cpu_s, memory_mb=config.memory_mb)


class Trainer:
    """Accepts finished groups, streams their datums to forward_backward, applies a step."""

    def __init__(self, client: TrainingClient, config: Config) -> None:
        self.client, self.config = client, config
        self.pending: list[Datum] = []
        self.pending_groups = 0
        self.sent: list[APIFuture[ForwardBackwardOutput]] = []

    def add(self, group: GroupResult) -> bool:
        """Queue a group's datums; True if it carried signal (its rewards differ)."""
        rewards = [r.reward for r in group.rollouts]
        advantages = group_relative_advantages(rewards)
        self.pending_groups += 1
        if any(advantages):
            self.pending += group.datums(advantages)
        if self.pending_groups >= self.config.substep_groups:
            self.flush()
        return any(advantages)

    def flush(self) -> None:
        if self.pending:  # sent at once: the server trains on it while more groups finish
            self.sent.append(
                self.client.forward_backward(self.pending, rl_loss(self.config.loss_fn))
            )
        self.pending, self.pending_groups = [], 0

    def step(self, learning_rate: float) -> dict[str, float] | None:
        """optim_step after every streamed sub-batch; None when no group carried signal."""
        self.flush()
        if not self.sent:
            return None
        optim = self.client.optim_step(AdamParams(learning_rate=learning_rate))
        losses = [f.result().metrics.get("loss:sum", 0.0) for f in self.sent]
        optim.result()
        metrics = {"train/loss": float(sum(losses)), "train/forward_backward_calls": len(self.sent)}
        self.sent = []
        return metrics


class Rollouts:
    """Groups sampled and graded on worker threads, each from the newest sampler at submission."""

    def __init__(
        self,
        pool: ThreadPoolExecutor,
        stream: ProblemStream,
        run: Callable[[CodeProblem, SamplingClient, int], GroupResult],
        in_flight_target: int,
    ) -> None:
        self.pool, self.stream, self.run, self.target = pool, stream, run, in_flight_target
        self.in_flight: set[Future[GroupResult]] = set()
        self.ready: deque[GroupResult] = deque()  # finished, not yet handed out
        self.sampler: SamplingClient | None = None
        self.version = 0

    def set_policy(self, sampler: SamplingClient, version: int) -> None:
        """Later submissions sample from ``sampler``; groups in flight keep theirs."""
        self.sampler, self.version = sampler, version

    def next_group(self) -> GroupResult:
        """The next finished group (oldest first), keeping ``in_flight_target`` groups going."""
        while not self.ready:
            while len(self.in_flight) < self.target:
                assert self.sampler is not None, "set_policy() first"  # noqa: S101 — an invariant of this code, not a check of input
                self.in_flight.add(
                    self.pool.submit(self.run, self.stream.next(), self.sampler, self.version)
                )
            done, _ = wait(self.in_flight, return_when=FIRST_COMPLETED)
            for future in done:
                self.in_flight.discard(future)
                self.ready.append(future.result())
        return self.ready.popleft()

    def requeue(self, problem: CodeProblem) -> None:
        self.stream.requeued.append(problem)

    def cancel_pending(self) -> None:
        for future in self.in_flight:
            future.cancel()


def step_metrics(
    groups: list[GroupResult], staleness: list[int], signal: int, stale: int
) -> dict[str, float]:
    rollouts = [r for g in groups for r in g.rollouts]
    return {
        "train/reward_mean": float(np.mean([r.reward for r in rollouts])),
        "train/pass_rate": float(np.mean([r.passed for r in rollouts])),
        "train/code_block_rate": float(np.mean([r.has_code for r in rollouts])),
        "train/second_turn_rate": float(np.mean([r.turns == 2 for r in rollouts])),
        "train/groups_with_signal": signal / len(groups),
        "train/staleness_mean": float(np.mean(staleness)),
        "train/stale_groups": stale,
    }


def main(config: Config) -> dict[str, float]:
    rl_loss(config.loss_fn)  # a bad name fails here, before any session starts
    if config.stale_policy not in ("requeue", "drop"):
        raise SystemExit(f"stale_policy must be requeue or drop, got {config.stale_policy!r}")
    save_config(config, RECIPE)
    train_problems, eval_problems = split(
        load_problems(config.problems), config.eval_fraction, config.seed
    )
    limits = _limits(config)
    params = SamplingParams(max_tokens=config.max_tokens, temperature=config.temperature)
    with connect(config) as service, ThreadPoolExecutor(config.num_rollout_workers) as pool:
        client, resumed = start_training(service, config, RECIPE)
        start = resumed.step if resumed else 0
        extra = resumed.extra if resumed else {}
        version = int(extra.get("version", start))  # optimizer updates applied so far
        tokenizer = client.get_tokenizer()

        def run(problem: CodeProblem, sampler: SamplingClient, sampled_at: int) -> GroupResult:
            return rollout_group(
                sampler,
                tokenizer,
                problem,
                version=sampled_at,
                group_size=config.group_size,
                params=params,
                two_turn=config.two_turn,
                limits=limits,
            )

        stream = ProblemStream(train_problems, config.seed, int(extra.get("cursor", 0)))
        rollouts = Rollouts(
            pool, stream, run, max(config.num_rollout_workers, config.groups_per_step)
        )
        sampler = client.save_weights_and_get_sampling_client()
        rollouts.set_policy(sampler, version)
        trainer = Trainer(client, config)
        first_eval: dict[str, float] = dict(extra.get("first_eval", {}))
        last_eval: dict[str, float] = {}
        logger = MetricsLogger(
            config.log_dir,
            total_steps=config.steps,
            start_step=start,
            params=config.to_dict(),
            desc=RECIPE,
            summary_keys=("train/reward_mean", "eval/pass_rate"),
        )
        with logger:
            for step in range(start, config.steps):
                if should_eval(config, step):
                    last_eval = evaluate(sampler, tokenizer, eval_problems, config)
                    first_eval = first_eval or last_eval
                    logger.log(step, last_eval, advance=False)
                started = time.monotonic()
                groups: list[GroupResult] = []
                stale = signal = 0
                while len(groups) < config.groups_per_step:
                    group = rollouts.next_group()
                    if version - group.version > config.max_steps_off_policy:
                        if config.stale_policy == "requeue":
                            rollouts.requeue(group.problem)  # sample it again, on-policy
                        stale += 1
                        continue
                    groups.append(group)
                    signal += trainer.add(group)  # streamed to forward_backward in sub-batches
                staleness = [version - g.version for g in groups]  # updates since sampled
                metrics = trainer.step(config.learning_rate_at(step)) or {}
                if metrics:  # the weights changed: new groups sample the new ones
                    version += 1
                    sampler = client.save_weights_and_get_sampling_client()
                    rollouts.set_policy(sampler, version)
                metrics.update(step_metrics(groups, staleness, signal, stale))
                metrics["time/step_s"] = time.monotonic() - started
                logger.log(step, metrics)
                if should_save(config, step + 1):
                    state = {"first_eval": first_eval, "version": version, "cursor": stream.cursor}
                    save_checkpoint(client, config.log_dir, step + 1, state)
            rollouts.cancel_pending()
            last_eval = evaluate(sampler, tokenizer, eval_problems, config)
            logger.log(config.steps, last_eval, advance=False)
        return finish_run(client, config.log_dir, first_eval, last_eval)


if __name__ == "__main__":
    main(parse_config(Config, RECIPE, description=__doc__))
