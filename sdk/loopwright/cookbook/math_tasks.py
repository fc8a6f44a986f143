"""Math word problems with verifiable answers: a built-in arithmetic task and GSM8K-style problems
from ``reasoning-gym``; the answer is the number after ``####``."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from .renderers import Message

__all__ = [
    "Problem",
    "arithmetic_eval_set",
    "arithmetic_problem",
    "extract_answer",
    "gsm_problems",
    "math_reward",
    "normalize_number",
    "prompt_messages",
]


@dataclass(frozen=True)
class Problem:
    """A question, its answer (a number as text) and optionally a worked solution."""

    question: str
    answer: str
    solution: str = ""


_ANSWER = re.compile(r"####\s*\$?\s*(-?[\d,]*\.?\d+)")


def normalize_number(text: str) -> str | None:
    """A number in canonical form ("1,200" -> "1200", "12.0" -> "12", "0.50" -> "0.5")."""
    try:
        value = Decimal(text.replace(",", "").strip().rstrip("."))
    except InvalidOperation:
        return None
    if not value.is_finite():
        return None
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


def extract_answer(text: str) -> str | None:
    """The number after the last ``####`` in ``text`` (canonical form), or None."""
    matches = _ANSWER.findall(text)
    return normalize_number(matches[-1]) if matches else None


def math_reward(text: str, answer: str) -> float:
    """1.0 when the answer after ``####`` equals ``answer``, else 0.0."""
    predicted = extract_answer(text)
    return 1.0 if predicted is not None and predicted == normalize_number(answer) else 0.0


# -- the built-in arithmetic task ---------------------------------------------------------------

_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}

ARITHMETIC_EXAMPLE = Problem("What is 2 + 3?", "5", "2 + 3 = 5\n#### 5")
"""The worked example shown before each arithmetic question (it teaches the answer format)."""


def arithmetic_problem(rng: random.Random, max_operand: int = 20, ops: str = "+") -> Problem:
    """One random question ``What is a <op> b?`` with operands in 1..max_operand."""
    op = rng.choice(ops)
    a, b = rng.randint(1, max_operand), rng.randint(1, max_operand)
    result = _OPS[op](a, b)
    return Problem(f"What is {a} {op} {b}?", str(result), f"{a} {op} {b} = {result}\n#### {result}")


def arithmetic_eval_set(
    size: int, seed: int, max_operand: int = 20, ops: str = "+"
) -> list[Problem]:
    """A fixed held-out set of distinct questions (drawn with their own seed)."""
    rng = random.Random(f"arithmetic-eval:{seed}")
    seen: dict[str, Problem] = {}
    distinct = len(ops) * max_operand * max_operand
    while len(seen) < min(size, distinct // 2):
        problem = arithmetic_problem(rng, max_operand, ops)
        seen.setdefault(problem.question, problem)
    return list(seen.values())


def arithmetic_train_problems(
    step: int, count: int, seed: int, held_out: set[str], max_operand: int = 20, ops: str = "+"
) -> list[Problem]:
    """The training questions of ``step`` (a function of seed and step, so a resumed run sees
    the same ones), never one of the held-out questions."""
    rng = random.Random(f"arithmetic-train:{seed}:{step}")
    out: list[Problem] = []
    while len(out) < count:
        problem = arithmetic_problem(rng, max_operand, ops)
        if problem.question not in held_out:
            out.append(problem)
    return out


# -- GSM8K-style problems -----------------------------------------------------------------------


def gsm_problems(size: int, seed: int) -> list[Problem]:
    """GSM8K-style word problems from reasoning-gym's ``gsm_symbolic`` generator."""
    try:
        import reasoning_gym
    except ImportError as exc:
        raise ImportError(
            "the gsm task needs reasoning-gym: pip install 'loopwright[cookbook]'"
        ) from exc
    dataset = reasoning_gym.create_dataset("gsm_symbolic", size=size, seed=seed)
    return [
        Problem(
            str(item["question"]),
            str(item["answer"]),
            str(item.get("metadata", {}).get("answer_cot", "")),
        )
        for item in dataset
    ]


def prompt_messages(problem: Problem, example: Problem | None) -> list[Message]:
    """The chat that asks ``problem``, after one worked ``example`` (if given)."""
    messages: list[Message] = []
    if example is not None:
        messages += [
            {"role": "user", "content": example.question},
            {"role": "assistant", "content": example.solution},
        ]
    messages.append({"role": "user", "content": problem.question})
    return messages
