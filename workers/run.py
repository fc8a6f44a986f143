"""Start a GPU worker: ``python -m workers.run --name gpu0 --base-model NAME [--device cuda]``.

One process per accelerator: a Celery worker with the solo pool on its own queue ``gpu.<name>``.
"""

from __future__ import annotations

import argparse
import os


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--name", default=os.environ.get("LOOPWRIGHT_WORKER_NAME", "worker0"))
    p.add_argument(
        "--base-model",
        default=os.environ.get("LOOPWRIGHT_WORKER_BASE_MODEL", "loopwright/tiny-byte-llama"),
    )
    p.add_argument("--device", default=os.environ.get("LOOPWRIGHT_WORKER_DEVICE", "cpu"))
    p.add_argument("--dtype", default=os.environ.get("LOOPWRIGHT_WORKER_DTYPE", ""))
    p.add_argument(
        "--capacity", type=int, default=int(os.environ.get("LOOPWRIGHT_WORKER_CAPACITY", "16"))
    )
    p.add_argument("--loglevel", default="INFO")
    args = p.parse_args(argv)
    os.environ.update(
        LOOPWRIGHT_WORKER_NAME=args.name,
        LOOPWRIGHT_WORKER_BASE_MODEL=args.base_model,
        LOOPWRIGHT_WORKER_DEVICE=args.device,
        LOOPWRIGHT_WORKER_DTYPE=args.dtype,
        LOOPWRIGHT_WORKER_CAPACITY=str(args.capacity),
    )
    from .celery_app import app

    app.worker_main(
        [
            "worker",
            "--queues",
            f"gpu.{args.name}",
            "--pool",
            "solo",
            "--concurrency",
            "1",
            "--prefetch-multiplier",
            "1",
            "--hostname",
            f"{args.name}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "--loglevel",
            args.loglevel,
        ]
    )


if __name__ == "__main__":
    main()
