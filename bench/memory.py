"""Memory of a host with N adapters against the base model loaded alone, each in a fresh process.

Run as a module, it is the probe: it loads one thing, runs one short forward pass (weights are
mapped lazily from safetensors, so only a pass makes them resident) and prints its memory as
JSON. Peak RSS comes from /proc/self/status on CPU, ``torch.cuda.max_memory_allocated`` on a GPU.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from workers.engine.adapters import AdapterConfig
from workers.engine.catalog import default_catalog
from workers.engine.host import HostConfig, ModelHost

from .report import MIB, RANK, Row, Settings


def probe(name: str, device: str, dtype: str, kind: str, adapters: int) -> dict[str, float]:
    """Load the base model alone (``base``) or a host with ``adapters`` resident adapters."""
    dev = torch.device(device)
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as spill:
        net: torch.nn.Module
        if kind == "base":
            path = default_catalog().materialize(name).path
            net = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))
            net.to(dev)
        else:
            # Room for every adapter: none is spilled to disk.
            cfg = HostConfig(
                device=device,
                dtype=dtype,
                max_loaded_adapters=max(adapters, 1),
                spill_dir=Path(spill),
            )
            host = ModelHost(name, cfg)
            for i in range(adapters):
                host.create_adapter(f"m{i}", AdapterConfig(rank=RANK, seed=i))
            params = host.pool.parameters("m0").values()
            out["adapter_mib"] = sum(p.numel() * p.element_size() for p in params) / MIB
            net = host.pool.model  # the last adapter created is active
        with torch.no_grad():
            net(input_ids=torch.arange(16, device=dev).unsqueeze(0), use_cache=False)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
            out["peak_mib"] = torch.cuda.max_memory_allocated(dev) / MIB
            out["now_mib"] = torch.cuda.memory_allocated(dev) / MIB
        else:
            status = Path("/proc/self/status").read_text()
            out["peak_mib"] = _status_kib(status, "VmHWM") / 1024
            out["now_mib"] = _status_kib(status, "VmRSS") / 1024
    return out


def _status_kib(status: str, key: str) -> float:
    for line in status.splitlines():
        if line.startswith(key + ":"):
            return float(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {key}")


def run_probe(s: Settings, kind: str, adapters: int = 0) -> dict[str, float]:
    cmd = [sys.executable, "-m", "bench.memory", s.model, s.device, s.dtype, kind, str(adapters)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"memory probe {kind} {adapters} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench_memory(s: Settings) -> list[Row]:
    """One row per adapter count (host / base alone), then the growth per added adapter."""
    unit = "peak GPU MiB" if s.device.startswith("cuda") else "peak RSS MiB"
    base = run_probe(s, "base")
    hosts = {n: run_probe(s, "host", n) for n in s.adapter_counts}
    adapter_mib = hosts[s.adapter_counts[0]]["adapter_mib"]
    rows = [
        Row(
            f"memory, host + {n} adapter{'s' * (n > 1)} ({unit})",
            m["peak_mib"],
            base["peak_mib"],
            "<=",
            # 10% over the base model plus the adapters' own weights
            1.1 + n * adapter_mib / base["peak_mib"],
            "reference: the base model loaded alone",
        )
        for n, m in hosts.items()
    ]
    lo, hi = min(hosts), max(hosts)
    if hi > lo:
        per = (hosts[hi]["now_mib"] - hosts[lo]["now_mib"]) / (hi - lo)
        rows.append(
            Row(
                "memory per added adapter (MiB)",
                per,
                adapter_mib,
                "<=",
                2.0,
                f"reference: one rank-{RANK} adapter's weights; the base model alone takes "
                f"{base['now_mib']:.0f} MiB; measured from {lo} to {hi} adapters",
            )
        )
    return rows


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__)
    p.add_argument("model")
    p.add_argument("device")
    p.add_argument("dtype")
    p.add_argument("kind", choices=["base", "host"])
    p.add_argument("adapters", type=int)
    a = p.parse_args()
    print(json.dumps(probe(a.model, a.device, a.dtype, a.kind, a.adapters)))


if __name__ == "__main__":
    main()
