"""Data-parallel benchmark: forward_backward tokens/s of one session on 1, 2 and 4 ranks.

Each rank is a spawned process with its own ModelHost (one thread each on a CPU, its own GPU
with ``--device cuda``), joined over gloo (CPU) or NCCL (CUDA) through a rendezvous file. The
coordinator times ``DataParallel.forward_backward`` of one fixed batch (datums of varied
lengths, split by token count) and reports tokens/s and the scaling efficiency
``tokens/s at N ÷ (N × tokens/s at 1)``; ``--sharded`` shards the base over the ranks (FSDP2)
first. Nothing asserts on speed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.multiprocessing as mp

from loopwright.types import Datum, ForwardBackwardInput, ModelInput
from workers.engine.adapters import AdapterConfig
from workers.engine.catalog import TINY_MODEL, default_catalog
from workers.engine.distributed import DataParallel, RankGroup, shard_base
from workers.engine.host import HostConfig, ModelHost

from .report import RANK, parse_with_quick


def batch(datums: int, tokens: int, vocab: int, seed: int = 0) -> ForwardBackwardInput:
    """``datums`` datums of ``tokens`` tokens on average (half to one and a half times)."""
    rng = np.random.default_rng(seed)
    data = []
    for n in rng.integers(tokens // 2, tokens * 3 // 2 + 1, size=datums):
        ids = rng.integers(0, vocab, size=int(n) + 1).tolist()
        data.append(
            Datum(
                model_input=ModelInput.from_ints(ids[:-1]),
                loss_fn_inputs={"target_tokens": ids[1:]},
            )
        )
    return ForwardBackwardInput(data=data, loss_fn="cross_entropy")


def _rank(rank: int, world: int, rendezvous: str, args: argparse.Namespace, out: Path) -> None:
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    device = f"cuda:{rank}" if args.device == "cuda" else "cpu"
    config = HostConfig(
        device=device,
        # a sharded base is loaded into host memory and only its shards go to the GPU
        load_device="cpu" if args.sharded else None,
        spill_dir=out / f"spill-{world}-{rank}",
    )
    host = ModelHost(args.model, config)
    group = RankGroup.join(rendezvous, rank=rank, world_size=world, device=device)
    if args.sharded:
        shard_base(host, group)
    dp = DataParallel(host, group)
    try:
        if rank != 0:
            dp.serve()
            return
        dp.create_adapter("bench", AdapterConfig(rank=RANK, seed=0))
        fwd = batch(args.datums, args.tokens, host.vocab_size)
        tokens = sum(d.model_input.length for d in fwd.data)
        dp.forward_backward("bench", fwd)  # warm-up
        times = []
        for _ in range(args.reps):
            if args.device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            dp.forward_backward("bench", fwd)
            if args.device == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        dp.stop()
        seconds = statistics.median(times)
        (out / f"result-{world}.json").write_text(
            json.dumps({"ranks": world, "tokens": tokens, "seconds": seconds})
        )
    finally:
        group.close()


def measure(world: int, args: argparse.Namespace, out: Path) -> dict:
    rendezvous = f"file://{out / f'rendezvous-{world}'}"
    mp.start_processes(
        _rank, args=(world, rendezvous, args, out), nprocs=world, join=True, start_method="spawn"
    )
    return json.loads((out / f"result-{world}.json").read_text())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default=TINY_MODEL, help="a catalog name (default: tiny)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--ranks", default="1,2,4", help="group sizes to measure")
    parser.add_argument("--datums", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=256, help="mean tokens per datum")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads per rank")
    parser.add_argument(
        "--sharded", action="store_true", help="shard the base over the ranks (FSDP2)"
    )
    parser.add_argument("--json", type=Path, help="also write the rows here")
    quick = {"ranks": "1,2", "datums": 4, "tokens": 32, "reps": 1}
    args = parse_with_quick(parser, argv, quick)
    sizes = [int(n) for n in args.ranks.split(",")]
    if args.device == "cuda" and max(sizes) > torch.cuda.device_count():
        parser.error(f"{max(sizes)} ranks need {max(sizes)} GPUs; {torch.cuda.device_count()} seen")
    default_catalog().materialize(args.model)  # once, before ranks race to build it
    cores = os.cpu_count() or 1
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for world in sizes:
            rows.append(measure(world, args, Path(tmp)))
    base = rows[0]["tokens"] / rows[0]["seconds"] / rows[0]["ranks"]
    print(
        f"{args.model} {'sharded' if args.sharded else 'whole'} on {args.device}, {args.datums} datums, {rows[0]['tokens']} tokens per "
        f"forward_backward, {args.threads} thread(s) per rank, {cores} cores, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print(f"{'ranks':>5}  {'seconds':>8}  {'tokens/s':>9}  {'speed-up':>8}  {'efficiency':>10}")
    for row in rows:
        tps = row["tokens"] / row["seconds"]
        row.update(tokens_per_s=tps, efficiency=tps / (row["ranks"] * base))
        speedup = tps / (rows[0]["tokens"] / rows[0]["seconds"])
        print(
            f"{row['ranks']:>5}  {row['seconds']:>8.3f}  {tps:>9.0f}  {speedup:>8.2f}  "
            f"{row['efficiency']:>10.0%}"
        )
    if args.json:
        args.json.write_text(
            json.dumps({"settings": vars(args) | {"json": str(args.json)}, "rows": rows}, indent=2)
        )


if __name__ == "__main__":
    main()
