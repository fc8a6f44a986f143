"""Batching benchmark: N sessions in one engine call against one session alone, in process.

Each of N sessions (its own rank-8 adapter on the tiny model) brings the same-sized work: a
sampling request, or a training step (forward_backward then optim_step). The rows give the
aggregate throughput of N sessions served by ``sample_many`` / ``forward_backward_many`` +
``optim_step_many`` as a ratio to one session alone, and the engine's sampling against HF
``generate`` (peft, one adapter set active per session) on the same 8 sessions' work. Nothing
asserts on speed; the target column says what we aim for.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import peft
import torch
from transformers import AutoModelForCausalLM

from loopwright.types import AdamParams, Datum, ForwardBackwardInput, ModelInput
from workers.engine.adapters import AdapterConfig
from workers.engine.catalog import TINY_MODEL, default_catalog
from workers.engine.host import HostConfig, ModelHost
from workers.engine.sampler import SampleJob

from .report import RANK, Row, format_table, parse_with_quick


def median_seconds(fn: Callable[[], object], reps: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def make_sessions(host: ModelHost, count: int) -> list[str]:
    ids = []
    for i in range(count):
        model_id = f"session-{i}"
        host.create_adapter(model_id, AdapterConfig(rank=RANK, seed=i))
        g = torch.Generator().manual_seed(i)
        params = host.pool.parameters(model_id)
        host.pool.load_state_dict(
            model_id, {k: torch.randn(p.shape, generator=g) * 0.02 for k, p in params.items()}
        )
        ids.append(model_id)
    return ids


def sample_jobs(a: argparse.Namespace, vocab: int, count: int) -> list[SampleJob]:
    rng = np.random.default_rng(a.seed)
    return [
        SampleJob(
            prompt=rng.integers(0, vocab, size=int(rng.integers(16, 49))).tolist(),
            num_samples=a.samples,
            max_tokens=a.new_tokens,
            temperature=1.0,
            stop_tokens=[],  # every sample runs to max_tokens
            seed=a.seed + i,
        )
        for i in range(count)
    ]


def train_inputs(a: argparse.Namespace, vocab: int, count: int) -> list[ForwardBackwardInput]:
    rng = np.random.default_rng(a.seed + 1)
    out = []
    for _ in range(count):
        seqs = rng.integers(0, vocab, size=(a.train_batch, a.train_tokens + 1))
        data = [
            Datum(
                model_input=ModelInput.from_ints(row[:-1].tolist()),
                loss_fn_inputs={"target_tokens": row[1:]},
            )
            for row in seqs
        ]
        out.append(ForwardBackwardInput(data=data, loss_fn="cross_entropy"))
    return out


def bench_sampling(a, host: ModelHost, ids: list[str]) -> tuple[list[Row], float]:
    jobs = sample_jobs(a, host.vocab_size, len(ids))
    per_session = a.samples * a.new_tokens
    rows, alone = [], 0.0
    for n in a.counts:
        requests = [(ids[i], [jobs[i]]) for i in range(n)]
        t = median_seconds(lambda r=requests: host.sample_many(r), a.reps)
        rate = n * per_session / t
        alone = alone or rate
        rows.append(
            Row(
                f"sample, {n} sessions (tokens/s)",
                rate,
                alone,
                ">=",
                3.0 if n == 8 else 1.0,
                f"1 prompt x {a.samples} samples x {a.new_tokens} tokens per session; "
                f"median {t:.3f}s; reference: 1 session alone",
            )
        )
    return rows, alone


def bench_training(a, host: ModelHost, ids: list[str]) -> list[Row]:
    inputs = train_inputs(a, host.vocab_size, len(ids))
    adam = AdamParams(learning_rate=1e-4)
    per_session = a.train_batch * a.train_tokens
    rows, alone = [], 0.0
    for n in a.counts:

        def step(n: int = n) -> None:
            host.forward_backward_many([(ids[i], inputs[i]) for i in range(n)])
            host.optim_step_many([(ids[i], adam) for i in range(n)])

        t = median_seconds(step, a.reps)
        rate = n * per_session / t
        alone = alone or rate
        rows.append(
            Row(
                f"forward_backward + optim_step, {n} sessions (tokens/s)",
                rate,
                alone,
                ">=",
                2.0 if n == 8 else 1.0,
                f"{a.train_batch}x{a.train_tokens} tokens cross_entropy per session; "
                f"median {t:.3f}s; reference: 1 session alone",
            )
        )
    return rows


def reference_model(host: ModelHost, ids: list[str]) -> peft.PeftModel:
    """A second base model with one peft adapter per session, holding the host's weights."""
    base = AutoModelForCausalLM.from_pretrained(host.materialized.path, dtype=host.dtype)
    cfg = host.pool.peft_config(ids[0])
    lora = peft.LoraConfig(
        r=cfg.r, lora_alpha=cfg.lora_alpha, target_modules=cfg.target_modules, lora_dropout=0.0
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*(tie_word_embeddings|checkpointing).*")
        ref = peft.get_peft_model(base, lora, adapter_name=ids[0])
        for model_id in ids[1:]:
            ref.add_adapter(model_id, lora)
    for model_id in ids:
        ours = host.pool.parameters(model_id)
        marker = f".{model_id}."
        with torch.no_grad():
            for name, p in ref.named_parameters():
                if marker in name:
                    p.copy_(ours[name.replace(marker, ".")])
    return ref.eval()


def bench_vs_generate(a, host: ModelHost, ids: list[str], n: int = 8) -> Row:
    jobs = sample_jobs(a, host.vocab_size, n)
    ref = reference_model(host, ids[:n])
    pad = host.tokenizer.pad_token_id

    @torch.no_grad()
    def reference() -> None:
        for model_id, job in zip(ids, jobs, strict=False):
            ref.set_adapter(model_id)
            out = ref.generate(
                input_ids=torch.tensor([job.prompt]),
                attention_mask=torch.ones(1, len(job.prompt), dtype=torch.long),
                do_sample=True,
                num_return_sequences=a.samples,
                max_new_tokens=a.new_tokens,
                min_new_tokens=a.new_tokens,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                pad_token_id=pad,
            )
            assert out.shape == (a.samples, len(job.prompt) + a.new_tokens)

    requests = [(ids[i], [jobs[i]]) for i in range(n)]
    t_ours = median_seconds(lambda: host.sample_many(requests), a.reps)
    t_ref = median_seconds(reference, a.reps)
    tokens = n * a.samples * a.new_tokens
    return Row(
        f"sample, {n} sessions vs HF generate (tokens/s)",
        tokens / t_ours,
        tokens / t_ref,
        ">=",
        2.0,
        f"the same work; reference: peft set_adapter + generate per session; "
        f"median {t_ours:.3f}s vs {t_ref:.3f}s",
    )


def _counts(text: str) -> tuple[int, ...]:
    return tuple(int(n) for n in text.split(","))


@contextmanager
def tiny_host(threads: int | None, reps: int, sessions: int) -> Iterator[tuple[ModelHost, list]]:
    """The tiny model's host (adapters spilled to a temporary folder) with ``sessions`` LoRA
    sessions, after a line saying the machine and a warning when it is busy."""
    if threads:
        torch.set_num_threads(threads)
    print(
        f"model={TINY_MODEL} device=cpu threads={torch.get_num_threads()} "
        f"cpus={os.cpu_count()} torch={torch.__version__} reps={reps}",
        flush=True,
    )
    if os.getloadavg()[0] > 0.5:
        print(f"warning: load average {os.getloadavg()[0]:.1f}: timings are noisy", file=sys.stderr)
    catalog = default_catalog()
    catalog.materialize(TINY_MODEL)
    with tempfile.TemporaryDirectory() as spill:
        host = ModelHost(TINY_MODEL, HostConfig(spill_dir=Path(spill)), catalog)
        yield host, make_sessions(host, sessions)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.batching_bench", description=__doc__)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--samples", type=int, default=4, help="samples per session's prompt")
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--train-batch", type=int, default=4, help="datums per session's step")
    p.add_argument("--train-tokens", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--sessions", dest="counts", type=_counts, default=(1, 2, 4, 8, 16), help="e.g. 1,2,4"
    )
    quick = {
        "counts": (1, 2),
        "reps": 1,
        "samples": 2,
        "new_tokens": 4,
        "train_batch": 2,
        "train_tokens": 16,
    }
    a = parse_with_quick(p, argv, quick)
    with tiny_host(a.threads, a.reps, max(a.counts)) as (host, ids):
        sampling, _ = bench_sampling(a, host, ids)
        together = min(8, max(a.counts))  # the sessions measured against generate
        rows = [*sampling, *bench_training(a, host, ids), bench_vs_generate(a, host, ids, together)]
    print(format_table(rows))


if __name__ == "__main__":
    main()
