"""Engine benchmark: the model host against plain transformers + peft on the same weights.

Each row is one run: a warm-up, then the median of several repetitions per side, and the
ratio ours / reference. Nothing here asserts on speed; the target column says what we aim for.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import peft
import torch
import transformers
from transformers import AutoModelForCausalLM

from loopwright.types import AdamParams, Datum, ForwardBackwardInput, ModelInput
from workers.engine.adapters import AdapterConfig
from workers.engine.catalog import DEFAULT_MODEL, TINY_MODEL, ModelCatalog, default_catalog
from workers.engine.host import HostConfig, ModelHost
from workers.engine.sampler import SampleJob

from .memory import bench_memory
from .report import RANK, Row, Settings, format_table

MODEL_ALIASES = {"tiny": TINY_MODEL, "default": DEFAULT_MODEL}
ADAPTER = "bench"
MAX_REPS = 50


# -- shared setup ----------------------------------------------------------------------------
def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_pair(
    ours: Callable[[], object],
    ref: Callable[[], object],
    reps: int,
    device: torch.device,
    min_seconds: float = 2.0,
) -> tuple[float, float, int]:
    """Median seconds per call of each side, and the repetitions taken.

    One warm-up each, then alternating repetitions so a change in machine load hits both sides
    alike. Short calls get more repetitions (about two seconds per side) so that one slow call
    cannot move the median.
    """
    warm = []
    for fn in (ours, ref):
        start = time.perf_counter()
        fn()
        sync(device)
        warm.append(time.perf_counter() - start)
    reps = max(reps, min(MAX_REPS, int(min_seconds / max(max(warm), 1e-6))))
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(reps):
        for fn, out in zip((ours, ref), times, strict=True):
            sync(device)
            start = time.perf_counter()
            fn()
            sync(device)
            out.append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1]), reps


def make_host(s: Settings, catalog: ModelCatalog, spill: Path) -> ModelHost:
    return ModelHost(s.model, HostConfig(device=s.device, dtype=s.dtype, spill_dir=spill), catalog)


def randomize_adapter(host: ModelHost, seed: int, scale: float = 0.02) -> None:
    """Non-zero lora_B so the adapter changes the model's outputs (peft starts it at zero)."""
    g = torch.Generator().manual_seed(seed)
    params = host.pool.parameters(ADAPTER)
    host.pool.load_state_dict(
        ADAPTER, {k: torch.randn(p.shape, generator=g) * scale for k, p in params.items()}
    )


def reference_model(host: ModelHost) -> peft.PeftModel:
    """A second base model from the same folder, with peft's LoRA on the host adapter's targets."""
    base = AutoModelForCausalLM.from_pretrained(host.materialized.path, dtype=host.dtype)
    cfg = host.pool.peft_config(ADAPTER)
    lora = peft.LoraConfig(
        r=cfg.r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=0.0,
        target_modules=cfg.target_modules,
        bias="none",
    )
    # peft keeps adapter weights in fp32 on a bf16 base, as the host does.
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=".*(tie_word_embeddings|is_gradient_checkpointing).*"
        )
        return peft.get_peft_model(base.to(host.device), lora)


def copy_adapter(host: ModelHost, ref: peft.PeftModel) -> None:
    """Give the reference the host adapter's current weights, name by name."""
    ours = host.pool.parameters(ADAPTER)
    theirs = {n.replace(".default.", "."): p for n, p in ref.named_parameters() if "lora_" in n}
    if set(ours) != set(theirs):
        raise RuntimeError(f"adapter parameters differ: {sorted(set(ours) ^ set(theirs))[:3]}")
    with torch.no_grad():
        for name, p in theirs.items():
            p.copy_(ours[name])


# -- 1. forward_backward + optim_step --------------------------------------------------------
def bench_train(s: Settings, host: ModelHost, ref: peft.PeftModel) -> Row:
    rng = np.random.default_rng(s.seed)
    seqs = rng.integers(0, host.vocab_size, size=(s.train_batch, s.train_tokens + 1))
    fwd = ForwardBackwardInput(
        data=[
            Datum(
                model_input=ModelInput.from_ints(row[:-1].tolist()),
                loss_fn_inputs={"target_tokens": row[1:]},
            )
            for row in seqs
        ],
        loss_fn="cross_entropy",
    )
    adam = AdamParams(learning_rate=1e-4)
    copy_adapter(host, ref)
    ref.train()
    ids_B_T = torch.from_numpy(seqs[:, :-1]).to(host.device)
    opt = torch.optim.AdamW(
        [p for p in ref.parameters() if p.requires_grad],
        lr=adam.learning_rate,
        betas=(adam.beta1, adam.beta2),
        eps=adam.eps,
        weight_decay=adam.weight_decay,
    )

    def ours() -> None:
        host.forward_backward(ADAPTER, fwd)
        host.optim_step(ADAPTER, adam)

    def reference() -> None:
        ref(input_ids=ids_B_T, labels=ids_B_T, use_cache=False).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    t_ours, t_ref, reps = time_pair(ours, reference, s.reps, host.device, s.min_seconds)
    tokens = s.train_batch * s.train_tokens
    return Row(
        "forward_backward + optim_step (tokens/s)",
        tokens / t_ours,
        tokens / t_ref,
        ">=",
        0.95,
        f"{s.train_batch}x{s.train_tokens} tokens, cross_entropy, rank {RANK}; "
        f"median of {reps}: {t_ours:.3f}s vs {t_ref:.3f}s",
    )


# -- 2. sampling -----------------------------------------------------------------------------
def left_pad(
    prompts: list[list[int]], pad: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts as one left-padded batch and its attention mask, as ``generate`` expects."""
    longest = max(len(p) for p in prompts)
    ids_B_L = torch.full((len(prompts), longest), pad, dtype=torch.long)
    mask_B_L = torch.zeros((len(prompts), longest), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids_B_L[i, longest - len(p) :] = torch.tensor(p)
        mask_B_L[i, longest - len(p) :] = 1
    return ids_B_L.to(device), mask_B_L.to(device)


def bench_sample(s: Settings, host: ModelHost, ref: peft.PeftModel) -> Row:
    rng = np.random.default_rng(s.seed + 1)
    lengths = rng.integers(16, 49, size=s.prompts)
    prompts = [rng.integers(0, host.vocab_size, size=int(n)).tolist() for n in lengths]
    jobs = [
        SampleJob(
            prompt=p,
            num_samples=s.samples,
            max_tokens=s.new_tokens,
            temperature=1.0,
            stop_tokens=[],  # no stop token: every sample runs to max_tokens
            seed=s.seed + i,
        )
        for i, p in enumerate(prompts)
    ]
    copy_adapter(host, ref)
    ref.eval()
    pad = host.tokenizer.pad_token_id
    pad = pad if pad is not None else host.tokenizer.eos_token_id
    ids_B_L, mask_B_L = left_pad(prompts, pad, host.device)
    longest = ids_B_L.shape[1]
    counts = {"ours": 0, "ref": 0}

    def ours() -> None:
        results = host.sample(ADAPTER, jobs)
        counts["ours"] = sum(r.sampled_tokens for r in results)

    @torch.no_grad()
    def reference() -> None:
        out = ref.generate(
            input_ids=ids_B_L,
            attention_mask=mask_B_L,
            do_sample=True,
            num_return_sequences=s.samples,
            max_new_tokens=s.new_tokens,
            min_new_tokens=s.new_tokens,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            pad_token_id=pad,
        )
        counts["ref"] = out[:, longest:].numel()

    torch.manual_seed(s.seed)
    t_ours, t_ref, reps = time_pair(ours, reference, s.reps, host.device, s.min_seconds)
    expected = s.prompts * s.samples * s.new_tokens
    if counts != {"ours": expected, "ref": expected}:
        raise RuntimeError(f"expected {expected} generated tokens per side, got {counts}")
    return Row(
        "sample (generated tokens/s)",
        expected / t_ours,
        expected / t_ref,
        ">=",
        1.0,
        f"{s.prompts} prompts x {s.samples} samples x {s.new_tokens} tokens vs HF generate; "
        f"median of {reps}: {t_ours:.3f}s vs {t_ref:.3f}s; stretch >= 2",
    )


# -- the run ---------------------------------------------------------------------------------
def environment(s: Settings) -> dict[str, str | int]:
    return {
        "model": s.model,
        "device": s.device,
        "dtype": s.dtype,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peft": peft.__version__,
        "threads": torch.get_num_threads(),
        "machine": (
            torch.cuda.get_device_name(s.device)
            if s.device.startswith("cuda")
            else f"{os.cpu_count()} cpus {platform.machine()}"
        ),
        "reps": s.reps,
    }


def run(s: Settings) -> list[Row]:
    catalog = default_catalog()
    catalog.materialize(s.model)  # build or convert once, before anything is timed
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as spill:
        host = make_host(s, catalog, Path(spill))
        host.create_adapter(ADAPTER, AdapterConfig(rank=RANK, seed=s.seed))
        randomize_adapter(host, s.seed)
        ref = reference_model(host)
        rows.append(bench_train(s, host, ref))
        rows.append(bench_sample(s, host, ref))
        del host, ref
        gc.collect()  # free both models before the memory probes start
    rows += bench_memory(s)
    return rows


def parse_args(argv: list[str] | None = None) -> tuple[Settings, argparse.Namespace]:
    p = argparse.ArgumentParser(prog="python -m bench.engine_bench", description=__doc__)
    p.add_argument("--model", default="tiny", help="tiny, default, or a catalog name")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], help="default: by device")
    p.add_argument(
        "--quick",
        action="store_true",
        help="CI's preset: 1 repetition of small batches, 1 and 2 adapters; ratios are noise",
    )
    p.add_argument("--reps", type=int, help="timed repetitions per side (default 5, quick 1)")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, help="also write the rows and environment here")
    a = p.parse_args(argv)
    s = Settings(
        model=MODEL_ALIASES.get(a.model, a.model),
        device=a.device,
        dtype=a.dtype or ("float32" if a.device == "cpu" else "bfloat16"),
        reps=a.reps or (1 if a.quick else 5),
        seed=a.seed,
    )
    if a.quick:
        s = replace(
            s,
            adapter_counts=(1, 2),
            min_seconds=0.0,
            train_batch=2,
            train_tokens=32,
            prompts=2,
            samples=2,
            new_tokens=8,
        )
    return s, a


def main(argv: list[str] | None = None) -> None:
    s, a = parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    env = environment(s)
    print(" ".join(f"{k}={v}" for k, v in env.items()), flush=True)
    load = os.getloadavg()[0]
    if s.device == "cpu" and load > 0.5:
        # A busy core stalls every multi-threaded op at its barrier: timings become noise.
        print(
            f"warning: load average {load:.1f} on {os.cpu_count()} cores; other processes "
            "compete for the CPU (numbers are only comparable on an idle machine or with "
            "--threads 1)",
            file=sys.stderr,
        )
    rows = run(s)
    print(format_table(rows))
    if a.json:
        a.json.write_text(json.dumps({"environment": env, "rows": [r.to_dict() for r in rows]}))


if __name__ == "__main__":
    main()
