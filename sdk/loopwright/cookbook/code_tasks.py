"""Coding problems for RL: prompts, the ``check_solution`` tool, grading and group rollouts.

A rollout samples a first answer; when it holds a code block (and the second turn is on), the
public tests run in the sandbox and their results come back as a tool message rendered in the
model's chat format, and the model answers again. The last code block written is graded on all
tests: 1 if all pass, 0 otherwise, -0.1 without a code block.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loopwright import SamplingClient
from loopwright.types import Datum, SamplingParams

from .datagen import data_path, read_jsonl
from .datums import RLSegment, rl_datum, sampled_segment
from .renderers import (
    Message,
    Tokenizer,
    continuation_tokens,
    decode,
    extract_code_block,
    render_prompt,
)
from .sandbox import SandboxLimits, run_tests

__all__ = [
    "NO_CODE_REWARD",
    "CodeProblem",
    "GroupResult",
    "check_solution_message",
    "first_messages",
    "grade",
    "load_problems",
    "rollout_group",
]

NO_CODE_REWARD = -0.1

SYSTEM = (
    "You are an expert Python programmer. Answer with the complete function in one "
    "```python code block. A tool, check_solution, runs your code block against the example "
    "tests and shows the results; after seeing them, reply with your final code block."
)


@dataclass(frozen=True)
class CodeProblem:
    """A task, its tests (``public_tests`` are shown to the model and run by the tool)."""

    id: str
    prompt: str
    tests: list[str]
    public_tests: list[str]

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> CodeProblem:
        return cls(
            id=str(record["id"]),
            prompt=str(record["prompt"]),
            tests=[str(t) for t in record["tests"]],
            public_tests=[str(t) for t in record.get("public_tests", record["tests"][:1])],
        )


def load_problems(path: str) -> list[CodeProblem]:
    """Problems from a JSONL of ``{id, prompt, tests, public_tests?}`` (a shipped name or path)."""
    return [CodeProblem.from_record(r) for r in read_jsonl(data_path(path))]


def first_messages(problem: CodeProblem) -> list[Message]:
    examples = "\n".join(problem.public_tests)
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"{problem.prompt}\n\nExample tests:\n{examples}"},
    ]


def check_solution_message(tokenizer: Tokenizer, summary: str) -> Message:
    """The tool's answer as a message: role "tool" where the template renders it, else "user"."""
    content = f"check_solution results:\n{summary}"
    probe: list[Message] = [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": "y"},
        {"role": "tool", "content": content},
    ]
    try:
        tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True)
    except Exception:
        return {"role": "user", "content": content}
    return {"role": "tool", "content": content}


def grade(text: str, problem: CodeProblem, limits: SandboxLimits) -> tuple[float, bool, bool]:
    """(reward, all tests passed, had a code block) of a final answer."""
    code = extract_code_block(text)
    if code is None:
        return NO_CODE_REWARD, False, False
    report = run_tests(code, problem.tests, limits)
    return (1.0 if report.all_passed else 0.0), report.all_passed, True


@dataclass
class Rollout:
    """One answer (one or two turns) and its grade."""

    segments: list[RLSegment]
    """Context and sampled token runs, in order; sampled ones carry logprobs."""

    reward: float
    """1 if every test passed, 0 if not, NO_CODE_REWARD without a code block."""

    passed: bool
    """Whether the final code passed every test."""

    has_code: bool
    """Whether the final answer held a code block."""

    turns: int
    """1, or 2 when the model answered again after check_solution."""


@dataclass
class GroupResult:
    """A problem's group of rollouts, and the policy version that sampled them."""

    problem: CodeProblem
    version: int
    rollouts: list[Rollout] = field(default_factory=list)

    def datums(self, advantages: list[float]) -> list[Datum]:
        """One datum per rollout, every sampled turn carrying its rollout's advantage."""
        return [
            rl_datum([segment.with_advantage(advantage) for segment in rollout.segments])
            for rollout, advantage in zip(self.rollouts, advantages, strict=True)
        ]


def rollout_group(
    sampler: SamplingClient,
    tokenizer: Tokenizer,
    problem: CodeProblem,
    *,
    version: int,
    group_size: int,
    params: SamplingParams,
    two_turn: bool,
    limits: SandboxLimits,
) -> GroupResult:
    """Sample ``group_size`` answers (and second turns after the tool), then grade each."""
    messages = first_messages(problem)
    prompt = render_prompt(tokenizer, messages)
    first = sampler.sample(prompt, num_samples=group_size, sampling_params=params).result()
    pending = []
    for seq in first.sequences:
        text = decode(tokenizer, seq.tokens)
        segments = [RLSegment(prompt), sampled_segment(seq.tokens, seq.logprobs)]
        code = extract_code_block(text)
        follow_up = None
        if two_turn and code is not None and seq.stop_reason == "stop":
            report = run_tests(code, problem.public_tests, limits)
            tool = check_solution_message(tokenizer, report.summary(problem.public_tests))
            history = [*messages, {"role": "assistant", "content": text}]
            bridge = continuation_tokens(tokenizer, history, [tool])
            segments.append(RLSegment(bridge))
            context = prompt + seq.tokens + bridge
            follow_up = sampler.sample(context, num_samples=1, sampling_params=params)
        pending.append((text, segments, follow_up))
    result = GroupResult(problem, version)
    for text, segments, follow_up in pending:  # every second turn was sent before any is awaited
        turns = 1
        if follow_up is not None:
            second = follow_up.result().sequences[0]
            segments.append(sampled_segment(second.tokens, second.logprobs))
            second_text = decode(tokenizer, second.tokens)
            if extract_code_block(second_text) is not None:
                text = second_text  # the last code block written is the final answer
            turns = 2
        reward, passed, has_code = grade(text, problem, limits)
        result.rollouts.append(Rollout(segments, reward, passed, has_code, turns))
    return result
