"""Generate the small datasets the cookbook ships (deterministic: the same files every run).

    python -m loopwright.cookbook.datagen [--out DIR]

Writes chat_sft.jsonl (conversations), preference_pairs.jsonl (chosen/rejected),
feedback.jsonl (binary feedback) and code_problems.jsonl into ``loopwright/cookbook/data``.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .code_problems import PROBLEMS

__all__ = ["DATA_DIR", "build_all", "write_all"]

DATA_DIR = Path(__file__).resolve().parent / "data"

CAPITALS = [
    ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"),
    ("Portugal", "Lisbon"), ("Japan", "Tokyo"), ("China", "Beijing"), ("India", "New Delhi"),
    ("Russia", "Moscow"), ("Canada", "Ottawa"), ("Australia", "Canberra"), ("Brazil", "Brasilia"),
    ("Argentina", "Buenos Aires"), ("Mexico", "Mexico City"), ("Egypt", "Cairo"),
    ("Kenya", "Nairobi"), ("Nigeria", "Abuja"), ("Turkey", "Ankara"), ("Greece", "Athens"),
    ("Norway", "Oslo"), ("Sweden", "Stockholm"), ("Finland", "Helsinki"),
    ("Denmark", "Copenhagen"), ("Poland", "Warsaw"), ("Austria", "Vienna"),
    ("Switzerland", "Bern"), ("Belgium", "Brussels"), ("Ireland", "Dublin"),
    ("the United Kingdom", "London"), ("Hungary", "Budapest"), ("the Czech Republic", "Prague"),
    ("Romania", "Bucharest"), ("Ukraine", "Kyiv"), ("Peru", "Lima"), ("Chile", "Santiago"),
    ("Colombia", "Bogota"), ("Venezuela", "Caracas"), ("Cuba", "Havana"),
    ("Thailand", "Bangkok"), ("Vietnam", "Hanoi"), ("South Korea", "Seoul"),
    ("Indonesia", "Jakarta"), ("the Philippines", "Manila"), ("Iran", "Tehran"),
    ("Iraq", "Baghdad"), ("Saudi Arabia", "Riyadh"), ("Morocco", "Rabat"),
    ("Ethiopia", "Addis Ababa"), ("Ghana", "Accra"), ("New Zealand", "Wellington"),
    ("Iceland", "Reykjavik"), ("Pakistan", "Islamabad"), ("Bangladesh", "Dhaka"),
    ("Nepal", "Kathmandu"), ("Malaysia", "Kuala Lumpur"), ("the United States", "Washington, D.C."),
]  # fmt: skip

# (from unit, to unit, factor): "How many <to> are in N <from>?"
CONVERSIONS = [
    ("meters", "centimeters", 100), ("kilometers", "meters", 1000), ("kilograms", "grams", 1000),
    ("hours", "minutes", 60), ("minutes", "seconds", 60), ("liters", "milliliters", 1000),
    ("days", "hours", 24), ("weeks", "days", 7), ("dollars", "cents", 100),
    ("feet", "inches", 12), ("yards", "feet", 3), ("centimeters", "millimeters", 10),
]  # fmt: skip

SYSTEM_PROMPTS = ["You are a concise assistant.", "Answer briefly and accurately."]

Record = dict[str, Any]
Chat = list[dict[str, str]]


def _arithmetic(rng: random.Random) -> tuple[str, int, str]:
    """A question, its result and a worked answer ending in ``#### result``."""
    op = rng.choice("+-*")
    if op == "*":
        a, b = rng.randint(2, 12), rng.randint(2, 12)
    else:
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        if op == "-" and b > a:
            a, b = b, a
    result = {"+": a + b, "-": a - b, "*": a * b}[op]
    symbol = {"+": "+", "-": "-", "*": "×"}[op]
    question = rng.choice(
        {
            "+": [f"What is {a} + {b}?", f"Add {a} and {b}.", f"What is the sum of {a} and {b}?"],
            "-": [f"What is {a} - {b}?", f"Subtract {b} from {a}.", f"What is {a} minus {b}?"],
            "*": [f"What is {a} × {b}?", f"Multiply {a} by {b}.", f"What is {a} times {b}?"],
        }[op]
    )
    return question, result, f"{a} {symbol} {b} = {result}\n#### {result}"


def _conversion(rng: random.Random) -> tuple[str, int, str]:
    src, dst, factor = rng.choice(CONVERSIONS)
    n = rng.randint(2, 15)
    one = src[:-1] if src != "feet" else "foot"
    question = rng.choice([f"How many {dst} are in {n} {src}?", f"Convert {n} {src} to {dst}."])
    answer = (
        f"1 {one} is {factor} {dst}, so {n} {src} is {n} × {factor} = {n * factor} {dst}.\n"
        f"#### {n * factor}"
    )
    return question, n * factor, answer


def _capital(rng: random.Random) -> tuple[str, str, str]:
    country, city = rng.choice(CAPITALS)
    question = rng.choice(
        [f"What is the capital of {country}?", f"Which city is the capital of {country}?"]
    )
    return question, city, f"The capital of {country} is {city}."


def _word_problem(rng: random.Random) -> tuple[str, int, str]:
    name = rng.choice(["Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goran", "Hana"])
    thing = rng.choice(["apples", "books", "marbles", "stickers", "pencils", "coins"])
    a, b = rng.randint(3, 40), rng.randint(2, 30)
    if rng.random() < 0.5:
        question = (
            f"{name} has {a} {thing} and gets {b} more. How many {thing} does {name} have now?"
        )
        return question, a + b, f"{a} + {b} = {a + b}\n#### {a + b}"
    a += b
    question = f"{name} has {a} {thing} and gives away {b}. How many {thing} are left?"
    return question, a - b, f"{a} - {b} = {a - b}\n#### {a - b}"


def _conversation(rng: random.Random) -> Chat:
    kind = rng.choices(["arith", "convert", "capital", "word", "followup"], [35, 20, 15, 15, 15])[0]
    chat: Chat = []
    if rng.random() < 0.25:
        chat.append({"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
    if kind == "followup":
        question, result, answer = _arithmetic(rng)
        k = rng.randint(2, 5)
        chat += [
            {"role": "user", "content": question},
            {"role": "assistant", "content": answer},
            {"role": "user", "content": f"Now multiply that by {k}."},
            {"role": "assistant", "content": f"{result} × {k} = {result * k}\n#### {result * k}"},
        ]
        return chat
    make: Callable[[random.Random], tuple[str, Any, str]] = {
        "arith": _arithmetic,
        "convert": _conversion,
        "capital": _capital,
        "word": _word_problem,
    }[kind]
    question, _, answer = make(rng)
    chat += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    return chat


def chat_sft(count: int = 400, seed: int = 1) -> list[Record]:
    """Short single- and two-turn conversations: arithmetic, unit conversions, capitals."""
    rng = random.Random(seed)
    return [{"messages": _conversation(rng)} for _ in range(count)]


def _bad_answer(rng: random.Random, result: Any, good: str) -> str:
    """A rejected answer: a wrong number in the same format, or an unhelpful reply."""
    if isinstance(result, int) and rng.random() < 0.7:
        wrong = result + rng.choice([-10, -2, -1, 1, 2, 10])
        # the result's last two occurrences are the answer: after "=" and after "####"
        return str(wrong).join(good.rsplit(str(result), 2))
    if isinstance(result, str) and rng.random() < 0.7:
        other = rng.choice([c for _, c in CAPITALS if c != result])
        return good.replace(result, other)
    return rng.choice(
        [
            "I don't know.",
            "That is not something I can help with.",
            "Figure it out yourself.",
            "Hmm, it is hard to say.",
        ]
    )


def _question(rng: random.Random) -> tuple[str, Any, str]:
    make = rng.choice([_arithmetic, _arithmetic, _conversion, _capital, _word_problem])
    return make(rng)


def preference_pairs(count: int = 240, seed: int = 2) -> list[Record]:
    """``{"prompt": [messages], "chosen": text, "rejected": text}``: right over wrong."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        question, result, good = _question(rng)
        out.append(
            {
                "prompt": [{"role": "user", "content": question}],
                "chosen": good,
                "rejected": _bad_answer(rng, result, good),
            }
        )
    return out


def feedback(count: int = 240, seed: int = 3) -> list[Record]:
    """``{"prompt": [messages], "completion": text, "label": bool}``: unpaired thumbs up/down."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        question, result, good = _question(rng)
        desirable = rng.random() < 0.5
        completion = good if desirable else _bad_answer(rng, result, good)
        out.append(
            {
                "prompt": [{"role": "user", "content": question}],
                "completion": completion,
                "label": desirable,
            }
        )
    return out


def build_all() -> dict[str, list[Record]]:
    """Every shipped dataset by file name."""
    return {
        "chat_sft.jsonl": chat_sft(),
        "preference_pairs.jsonl": preference_pairs(),
        "feedback.jsonl": feedback(),
        "code_problems.jsonl": [dict(p) for p in PROBLEMS],
    }


def to_jsonl(records: list[Record]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


def write_all(out: Path = DATA_DIR) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, records in build_all().items():
        path = out / name
        path.write_text(to_jsonl(records), encoding="utf-8")
        paths.append(path)
    return paths


def read_jsonl(path: str | Path) -> list[Record]:
    """The records of a JSONL file (blank lines skipped)."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def data_path(name_or_path: str) -> Path:
    """A shipped dataset by file name, or any path."""
    path = Path(name_or_path)
    if path.exists():
        return path
    shipped = DATA_DIR / name_or_path
    if shipped.exists():
        return shipped
    raise FileNotFoundError(f"no dataset {name_or_path!r} (nor {shipped})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=DATA_DIR)
    for written in write_all(parser.parse_args().out):
        print(written)
