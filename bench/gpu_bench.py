"""Accelerator benchmark: bf16 decode against the memory-bandwidth roofline, and training MFU.

Built for a lent GPU machine (``python -m bench.gpu_bench``) and runnable anywhere with a
smaller preset (``--preset smoke --device cpu`` checks the script end to end in seconds).

A Llama-style base of about 1B parameters is built from a config in code (seeded random
weights: speed does not depend on their values) and served by a ``ModelHost`` with 8 LoRA
sessions, exactly as a worker serves it.

- **Decode.** 64 sequences (8 sessions x 8 samples) decode together through ``sample_many``.
  Each decode step must read every base weight once and each sequence's KV cache, so the step
  takes at least ``bytes / bandwidth``; the roofline is ``batch / that time`` tokens/s. The
  bandwidth is measured on the device (a large device-to-device copy) and also given from the
  device's data sheet when it is known.
- **Training.** ``forward_backward_many`` of the 8 sessions then ``optim_step_many``. With the
  base frozen, a token costs about ``2P`` FLOPs forward and ``2P`` backward (activation
  gradients only; LoRA's own are negligible at rank 16), plus attention, ``4 * layers * T * d``
  forward per token at sequence length ``T`` and twice that backward. MFU is that work per
  second over the peak: the data sheet's dense bf16 figure, and a measured large matmul.

Prints a table and, with ``--json``, the raw figures.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from loopwright.types import AdamParams, Datum, ForwardBackwardInput, ModelInput
from workers.engine.adapters import AdapterConfig
from workers.engine.catalog import ModelCatalog
from workers.engine.host import HostConfig, ModelHost
from workers.engine.sampler import SampleJob
from workers.engine.tiny_model import build_tiny_tokenizer

# (memory bandwidth GB/s, dense bf16 TFLOPS) from the vendors' data sheets, by device name
DATA_SHEETS = {
    "H200": (4800.0, 989.0),
    "H100 80GB HBM3": (3350.0, 989.0),
    "H100 PCIe": (2000.0, 756.0),
    "A100-SXM4-80GB": (2039.0, 312.0),
    "A100-SXM4-40GB": (1555.0, 312.0),
    "L40S": (864.0, 362.0),
}


@dataclass(frozen=True)
class Preset:
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    sessions: int
    samples: int  # per session: sessions x samples sequences decode together
    prompt_tokens: int
    new_tokens: int
    train_datums: int  # per session
    train_tokens: int  # per datum
    rank: int


PRESETS = {
    # about 1.1B parameters, shaped like TinyLlama-1.1B
    "1b": Preset(2048, 5632, 22, 32, 4, 32000, 8, 8, 128, 256, 4, 1024, 16),
    # seconds on a CPU: the same code paths
    "smoke": Preset(64, 172, 2, 4, 2, 512, 2, 2, 8, 8, 2, 16, 4),
}


def build_base(preset: Preset, folder: Path, dtype: torch.dtype) -> int:
    """Write an HF folder of a Llama with ``preset``'s shape; returns its parameter count."""
    tokenizer = build_tiny_tokenizer()  # ids 0..258: valid in any vocabulary of at least 259
    config = LlamaConfig(
        vocab_size=max(preset.vocab, len(tokenizer)),
        hidden_size=preset.hidden,
        intermediate_size=preset.intermediate,
        num_hidden_layers=preset.layers,
        num_attention_heads=preset.heads,
        num_key_value_heads=preset.kv_heads,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(dtype)  # type: ignore[arg-type]  # transformers' .to stub
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measured_bandwidth(device: torch.device, mib: int) -> float:
    """Bytes/s of a device-to-device copy of ``mib`` MiB (read + write counted)."""
    x = torch.empty(mib << 20, dtype=torch.uint8, device=device)
    y = torch.empty_like(x)
    y.copy_(x)
    synchronize(device)
    reps = 10
    start = time.perf_counter()
    for _ in range(reps):
        y.copy_(x)
    synchronize(device)
    return 2 * x.numel() * reps / (time.perf_counter() - start)


def measured_matmul_flops(device: torch.device, dtype: torch.dtype, n: int) -> float:
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    a @ b
    synchronize(device)
    reps = 10
    start = time.perf_counter()
    for _ in range(reps):
        a @ b
    synchronize(device)
    return 2 * n**3 * reps / (time.perf_counter() - start)


def make_sessions(host: ModelHost, preset: Preset) -> list[str]:
    ids = [f"session-{i}" for i in range(preset.sessions)]
    for i, model_id in enumerate(ids):
        host.create_adapter(model_id, AdapterConfig(rank=preset.rank, alpha=32.0, seed=i))
    return ids


def bench_decode(host: ModelHost, ids: list[str], preset: Preset) -> dict:
    g = torch.Generator().manual_seed(1)
    requests = [
        (
            model_id,
            [
                SampleJob(
                    prompt=torch.randint(0, 256, (preset.prompt_tokens,), generator=g).tolist(),
                    num_samples=preset.samples,
                    max_tokens=preset.new_tokens,
                    temperature=1.0,
                    stop_tokens=[],  # every sequence runs to max_tokens
                    seed=i,
                )
            ],
        )
        for i, model_id in enumerate(ids)
    ]
    host.sample_many(requests[:1])  # warm-up: kernels, allocator
    synchronize(host.device)
    start = time.perf_counter()
    out = host.sample_many(requests)
    synchronize(host.device)
    seconds = time.perf_counter() - start
    for result in out:
        if isinstance(result, Exception):
            raise result
    batch = preset.sessions * preset.samples
    return {"batch": batch, "seconds": seconds, "tokens": batch * preset.new_tokens}


def decode_roofline(host: ModelHost, preset: Preset, bandwidth: float, batch: int) -> float:
    """Tokens/s if every decode step moved only the weights and the KV cache at ``bandwidth``.

    The KV cache is taken at its mean length over the decode (prompt + half the new tokens);
    the prefill is left out, which flatters the roofline slightly.
    """
    model = host.pool.model
    element = next(model.parameters()).element_size()
    weights = sum(p.numel() for n, p in model.named_parameters() if "lora_" not in n) * element
    head_dim = preset.hidden // preset.heads
    mean_length = preset.prompt_tokens + preset.new_tokens / 2
    kv = 2 * preset.layers * preset.kv_heads * head_dim * element * mean_length * batch
    return batch * bandwidth / (weights + kv)


def train_inputs(preset: Preset, count: int) -> list[ForwardBackwardInput]:
    g = torch.Generator().manual_seed(2)
    out = []
    for _ in range(count):
        rows = torch.randint(0, 256, (preset.train_datums, preset.train_tokens + 1), generator=g)
        data = [
            Datum(
                model_input=ModelInput.from_ints(row[:-1].tolist()),
                loss_fn_inputs={"target_tokens": row[1:].tolist()},
            )
            for row in rows
        ]
        out.append(ForwardBackwardInput(data=data, loss_fn="cross_entropy"))
    return out


def bench_training(host: ModelHost, ids: list[str], preset: Preset, steps: int) -> dict:
    inputs = train_inputs(preset, len(ids))
    adam = AdamParams(learning_rate=1e-5)

    def step() -> None:
        for result in host.forward_backward_many(list(zip(ids, inputs, strict=True))):
            if isinstance(result, Exception):
                raise result
        host.optim_step_many([(model_id, adam) for model_id in ids])

    step()  # warm-up
    synchronize(host.device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    synchronize(host.device)
    seconds = (time.perf_counter() - start) / steps
    return {
        "seconds_per_step": seconds,
        "tokens": len(ids) * preset.train_datums * preset.train_tokens,
    }


def training_flops_per_token(params: int, preset: Preset) -> float:
    """Frozen base: 2P forward + 2P backward (activation gradients), plus attention scores and
    values (4 * layers * T * d forward at mean context T/2 causal, twice that backward)."""
    attention = 4 * preset.layers * (preset.train_tokens / 2) * preset.hidden
    return 4 * params + 3 * attention


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default="1b")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default=None, help="default: bfloat16 on cuda, float32 on cpu")
    p.add_argument("--steps", type=int, default=5, help="training steps timed")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    preset = PRESETS[a.preset]
    device = torch.device(a.device)
    dtype_name = a.dtype or ("bfloat16" if device.type == "cuda" else "float32")
    dtype = getattr(torch, dtype_name)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    sheet = next((v for k, v in DATA_SHEETS.items() if k in name), None)

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "base"
        params = build_base(preset, folder, dtype)
        catalog = ModelCatalog(cache_dir=Path(tmp) / "cache", folders={"bench/base": folder})
        host = ModelHost(
            "bench/base",
            HostConfig(device=a.device, dtype=dtype_name, max_batch_tokens=1 << 16),
            catalog=catalog,
        )
        ids = make_sessions(host, preset)
        decode = bench_decode(host, ids, preset)
        training = bench_training(host, ids, preset, a.steps)

    small = a.preset == "smoke"
    bandwidth = measured_bandwidth(device, 8 if small else 1024)
    peak = measured_matmul_flops(device, dtype, 256 if small else 8192)
    decode_rate = decode["tokens"] / decode["seconds"]
    roof_measured = decode_roofline(host, preset, bandwidth, decode["batch"])
    train_rate = training["tokens"] / training["seconds_per_step"]
    achieved = train_rate * training_flops_per_token(params, preset)
    report = {
        "device": name,
        "dtype": dtype_name,
        "preset": a.preset,
        "parameters": params,
        "preset_shape": asdict(preset),
        "decode_tokens_per_s": decode_rate,
        "decode_batch": decode["batch"],
        "measured_bandwidth_gb_s": bandwidth / 1e9,
        "decode_roofline_tokens_per_s_measured": roof_measured,
        "decode_fraction_of_roofline_measured": decode_rate / roof_measured,
        "train_tokens_per_s": train_rate,
        "train_tflops": achieved / 1e12,
        "measured_matmul_tflops": peak / 1e12,
        "mfu_vs_measured_matmul": achieved / peak,
    }
    if sheet is not None:
        roof_sheet = decode_roofline(host, preset, sheet[0] * 1e9, decode["batch"])
        report |= {
            "sheet_bandwidth_gb_s": sheet[0],
            "decode_fraction_of_roofline_sheet": decode_rate / roof_sheet,
            "sheet_bf16_tflops": sheet[1],
            "mfu_vs_sheet": achieved / (sheet[1] * 1e12),
        }
    if a.json:
        print(json.dumps(report, indent=2))
    else:
        width = max(map(len, report))
        for key, value in report.items():
            shown = f"{value:,.4g}" if isinstance(value, float) else value
            print(f"{key:<{width}}  {shown}")
    return report


if __name__ == "__main__":
    main()
