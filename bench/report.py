"""What a benchmark run is (``Settings``) and what it prints (``Row``s in a table)."""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass

RANK = 8  # LoRA rank of every adapter in the benchmark
MIB = 2**20


@dataclass(frozen=True)
class Settings:
    """One benchmark run: the model, where it runs, and the size of each workload."""

    model: str
    device: str
    dtype: str
    reps: int
    seed: int = 0
    train_batch: int = 8  # datums per forward_backward
    train_tokens: int = 128  # tokens per datum
    prompts: int = 8
    samples: int = 4  # per prompt
    new_tokens: int = 64
    adapter_counts: tuple[int, ...] = (1, 8, 32)
    min_seconds: float = 2.0  # timed work per side that short calls are repeated up to


@dataclass
class Row:
    """One line of the table; ``ratio`` is ours / reference."""

    metric: str
    ours: float
    reference: float
    target_op: str  # ">=" or "<="
    target: float
    note: str = ""

    @property
    def ratio(self) -> float:
        return self.ours / self.reference if self.reference else float("nan")

    @property
    def met(self) -> bool:
        return self.ratio >= self.target if self.target_op == ">=" else self.ratio <= self.target

    def to_dict(self) -> dict:
        return {**asdict(self), "ratio": self.ratio, "met": self.met}


def _num(x: float) -> str:
    return f"{x:,.1f}" if abs(x) >= 100 else f"{x:.3g}"


def format_table(rows: list[Row]) -> str:
    """Aligned columns (metric, ours, reference, ratio, target, met), then one note per row."""
    head = ("metric", "ours", "reference", "ratio", "target", "met")
    body = [
        (
            r.metric,
            _num(r.ours),
            _num(r.reference),
            f"{r.ratio:.2f}",
            f"{'≥' if r.target_op == '>=' else '≤'} {r.target:.2f}",
            "yes" if r.met else "NO",
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head))]

    def fmt(line: tuple[str, ...]) -> str:
        first, *rest = line
        cells = [c.rjust(w) for c, w in zip(rest, widths[1:], strict=True)]
        return "  ".join([first.ljust(widths[0]), *cells])

    lines = [fmt(head), "  ".join("-" * w for w in widths), *map(fmt, body)]
    lines += ["", *(f"{r.metric}: {r.note}" for r in rows if r.note)]
    return "\n".join(lines)


def parse_with_quick(
    parser: argparse.ArgumentParser, argv: list[str] | None, quick: dict[str, object]
) -> argparse.Namespace:
    """Parse with a ``--quick`` flag: the smallest sizes that still run every part in seconds
    (CI's preset, ``make bench-quick``; its ratios say nothing). Flags given explicitly win."""
    parser.add_argument(
        "--quick", action="store_true", help="CI's preset: tiny sizes, seconds; ratios are noise"
    )
    args = parser.parse_args(argv)
    if args.quick:
        parser.set_defaults(**quick)
        args = parser.parse_args(argv)
    return args
