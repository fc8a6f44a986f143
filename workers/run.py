"""Start a GPU worker: ``python -m workers.run --name gpu0 --base-model NAME [--device cuda]
[--memory 80GiB] [--subnet subnet-… --security-group sg-…]``.

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
    p.add_argument(
        "--subnet",
        action="append",
        dest="subnets",
        help="a VPC subnet this host reaches (repeatable; default: $LOOPWRIGHT_WORKER_SUBNETS, "
        "comma-separated); none: the open network, for sessions without vpc_config",
    )
    p.add_argument(
        "--security-group",
        action="append",
        dest="security_groups",
        help="a security group this host offers (repeatable; default: "
        "$LOOPWRIGHT_WORKER_SECURITY_GROUPS, comma-separated)",
    )
    p.add_argument(
        "--address",
        default=os.environ.get("LOOPWRIGHT_WORKER_ADDRESS", ""),
        help="the host name or IP the other ranks of a replica group reach this worker at "
        "(default: $LOOPWRIGHT_WORKER_ADDRESS, else the host name)",
    )
    p.add_argument(
        "--memory",
        default=os.environ.get("LOOPWRIGHT_WORKER_MEMORY", ""),
        help="the memory this worker may use, e.g. 80GiB (default: $LOOPWRIGHT_WORKER_MEMORY, "
        "else the accelerator's; a cpu worker without it holds its base whole); a base that "
        "does not fit it whole is sharded over a group of such workers",
    )
    p.add_argument(
        "--snapshot-every-steps",
        type=int,
        help="snapshot each training model every N optimizer steps (0: never by count; "
        "default: $LOOPWRIGHT_SNAPSHOT_EVERY_STEPS, 20)",
    )
    p.add_argument(
        "--snapshot-every-seconds",
        type=float,
        help="and every S seconds after its first change (0: never by time; default: "
        "$LOOPWRIGHT_SNAPSHOT_EVERY_SECONDS, 120)",
    )
    p.add_argument("--loglevel", default="INFO")
    args = p.parse_args(argv)
    if args.snapshot_every_steps is not None:
        os.environ["LOOPWRIGHT_SNAPSHOT_EVERY_STEPS"] = str(args.snapshot_every_steps)
    if args.snapshot_every_seconds is not None:
        os.environ["LOOPWRIGHT_SNAPSHOT_EVERY_SECONDS"] = str(args.snapshot_every_seconds)
    os.environ.update(
        LOOPWRIGHT_WORKER_NAME=args.name,
        LOOPWRIGHT_WORKER_BASE_MODEL=args.base_model,
        LOOPWRIGHT_WORKER_DEVICE=args.device,
        LOOPWRIGHT_WORKER_DTYPE=args.dtype,
        LOOPWRIGHT_WORKER_CAPACITY=str(args.capacity),
        LOOPWRIGHT_WORKER_ADDRESS=args.address,
        LOOPWRIGHT_WORKER_MEMORY=args.memory,
        LOOPWRIGHT_WORKER_SUBNETS=",".join(
            args.subnets if args.subnets is not None else _listed("LOOPWRIGHT_WORKER_SUBNETS")
        ),
        LOOPWRIGHT_WORKER_SECURITY_GROUPS=",".join(
            args.security_groups
            if args.security_groups is not None
            else _listed("LOOPWRIGHT_WORKER_SECURITY_GROUPS")
        ),
    )
    from .celery_app import app, current_runtime

    port = os.environ.get("LOOPWRIGHT_WORKER_METRICS_PORT")
    if port:  # before the base model loads: a slow start is alive, not ready
        from django.conf import settings

        from .telemetry import serve

        stale = max(60.0, 6 * settings.WORKER_LEASE_SECONDS)
        serve(int(port), current_runtime, stale_after=stale)
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


def _listed(variable: str) -> list[str]:
    """A comma-separated environment variable as a list."""
    return [item.strip() for item in os.environ.get(variable, "").split(",") if item.strip()]


if __name__ == "__main__":
    main()
