"""Recorded sampling (``record_stability_info``) through a whole stack: sampled tokens per second
with recording against the same samples without it, and what the recordings store per 1,000
sampled tokens against the bare arrays a loss needs (an int32 token and a float32 logprob each).

Both sides sample from one live model through the ``loopwright`` SDK, the same waves of requests
(prompts × samples × new tokens, no stop, seeded), alternating in blocks so that a change in the
machine's load hits both alike; each side's median wave counts.

    python -m bench.recorded_bench [--quick] [--model tiny|default] [--backend postgres-redis|embedded]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench import stacks
from bench.report import Row, format_table, parse_with_quick
from loopwright import ServiceClient
from loopwright.types import SamplingParams
from tests.e2e.chaos import database
from tests.e2e.stack import TINY, Stack

SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"
MODELS = {"tiny": TINY, "default": SMOL}


def wave(sampler, prompts: list[list[int]], samples: int, new_tokens: int, seed: int) -> int:
    """One request per prompt, all in flight at once; the sampled tokens they returned."""
    params = [
        SamplingParams(max_tokens=new_tokens, seed=seed + i, stop=[]) for i in range(len(prompts))
    ]
    futures = [sampler.sample(p, samples, params[i]) for i, p in enumerate(prompts)]
    return sum(len(s.tokens) for f in futures for s in f.result().sequences)


def measure(svc: ServiceClient, base_model: str, args) -> tuple[list[float], list[float], int]:
    """Tokens/s of each wave, recorded and plain; the sampled tokens recorded."""
    tc = svc.create_lora_training_client(base_model, rank=8, seed=0)
    recorded = tc.create_sampling_client(record_stability_info=True)
    plain = tc.create_sampling_client()
    prompts = [
        [(7 * i + j) % 200 + 1 for j in range(args.prompt_tokens)] for i in range(args.prompts)
    ]
    for sampler in (recorded, plain):  # warm both up
        wave(sampler, prompts, args.samples, args.new_tokens, seed=0)
    rates: dict[str, list[float]] = {"recorded": [], "plain": []}
    recorded_tokens = args.prompts * args.samples * args.new_tokens  # the warm-up's
    for rep in range(args.reps):
        order = (("recorded", recorded), ("plain", plain))
        for name, sampler in order if rep % 2 == 0 else reversed(order):
            start = time.perf_counter()
            tokens = wave(sampler, prompts, args.samples, args.new_tokens, seed=1000 * (rep + 1))
            seconds = time.perf_counter() - start
            rates[name].append(tokens / seconds)
            if args.verbose:
                print(f"{name}: {tokens} tokens in {seconds:.2f} s")
            if name == "recorded":
                recorded_tokens += tokens
    return rates["recorded"], rates["plain"], recorded_tokens


def stored(stack: Stack) -> tuple[int, int]:
    """Bytes the recordings hold (what the quota counts), and the sample results' JSON bytes."""
    with database(stack) as conn:
        (held,) = conn.execute(
            "SELECT coalesce(sum(size_bytes), 0) FROM training_sessions_recordedsample"
        ).fetchone()
        (as_json,) = conn.execute(
            "SELECT coalesce(sum(length(o.result::text)), 0) FROM training_sessions_operation o "
            "JOIN training_sessions_recordedsample r ON r.id = o.id"
        ).fetchone()
    return int(held), int(as_json)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny", help="tiny, default (SmolLM2-135M) or a name")
    parser.add_argument(
        "--backend", default="postgres-redis", choices=("postgres-redis", "embedded")
    )
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--verbose", action="store_true", help="print every wave")
    quick = {"model": "tiny", "reps": 1, "prompts": 2, "samples": 2, "new_tokens": 8}
    args = parse_with_quick(parser, argv, quick)
    base_model = MODELS.get(args.model, args.model)
    workers = {"bench": [] if base_model == TINY else ["--base-model", base_model]}
    stack = stacks.start(
        Stack(
            args.backend,
            Path(tempfile.mkdtemp(prefix="lw-bench-")),
            workers=workers,
            ready_model=base_model,
        )
    )
    try:
        with ServiceClient(
            base_url=stack.url, api_key=stack.keys["alice"], role_arn=stack.roles["alice"]
        ) as svc:
            recorded, plain, tokens = measure(svc, base_model, args)
            held, as_json = stored(stack)  # before the session ends (its recordings go with it)
    finally:
        stacks.stop(stack)
    per_prompt = args.prompt_tokens / (args.samples * args.new_tokens)
    rows = [
        Row(
            "sampled tokens/s, recorded vs not",
            statistics.median(recorded),
            statistics.median(plain),
            ">=",
            0.95,
            f"{args.reps} waves a side of {args.prompts} requests × {args.samples} samples × "
            f"{args.new_tokens} tokens ({base_model}, {args.backend}); medians",
        ),
        Row(
            "stored bytes per 1,000 sampled tokens",
            1000 * held / tokens,
            8000.0,
            "<=",
            1.25,
            f"reference: an int32 token and a float32 logprob each; ours adds the prompt once per "
            f"request ({per_prompt:.3g} prompt tokens per sampled token here); the same "
            f"sequences as the results' JSON: {1000 * as_json / tokens:,.0f} bytes",
        ),
    ]
    print(format_table(rows))


if __name__ == "__main__":
    main()
