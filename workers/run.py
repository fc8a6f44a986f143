"""Start a GPU worker: ``python -m workers.run --name gpu0 --base-model NAME [--device cuda]
[--memory 80GiB] [--subnet subnet-… --security-group sg-…]``.

One process per accelerator: a Celery worker with the solo pool on its own queue ``gpu.<name>``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Mapping

# Read once, when torch's OpenMP runtime loads (below: base_fit imports torch). Between parallel
# regions torch's idle CPU threads sleep instead of spinning: a CPU worker shares its cores with
# the control plane and the database, which the spinning took (bench/README.md, "Operation
# cost": 129 against 26 ms of CPU per small forward_backward of 8 sessions packed on 2 cores).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from .base_fit import parse_memory
from .settings import WorkerSettings


def parse(argv: list[str] | None, environ: Mapping[str, str]) -> tuple[WorkerSettings, str]:
    """The worker's settings: its ``LOOPWRIGHT_WORKER_*`` variables (``WorkerSettings``), with
    the flags given over them; and the log level."""
    base = WorkerSettings.from_env(environ)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--name", default=base.name, help="its queue is gpu.<name> (default: the host name)")  # fmt: skip
    p.add_argument("--base-model", default=base.base_model)
    p.add_argument("--device", default=base.device)
    p.add_argument("--dtype", default=base.dtype, help="default: float32 on cpu, bfloat16 else")
    p.add_argument("--capacity", type=int, default=base.capacity)
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
        default=base.address,
        help="the host name or IP the other ranks of a replica group reach this worker at "
        "(default: $LOOPWRIGHT_WORKER_ADDRESS, else the host name)",
    )
    p.add_argument(
        "--memory",
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
    try:
        settings = dataclasses.replace(
            base,
            name=args.name,
            base_model=args.base_model,
            device=args.device,
            dtype=args.dtype or None,
            capacity=args.capacity,
            subnet_ids=base.subnet_ids if args.subnets is None else tuple(args.subnets),
            security_group_ids=(
                base.security_group_ids
                if args.security_groups is None
                else tuple(args.security_groups)
            ),
            address=args.address or base.address,
            memory_bytes=base.memory_bytes if args.memory is None else parse_memory(args.memory),
            snapshot_every_steps=args.snapshot_every_steps,
            snapshot_every_seconds=args.snapshot_every_seconds,
        )
    except ValueError as exc:
        p.error(str(exc))
    return settings, args.loglevel


def main(argv: list[str] | None = None) -> None:
    settings, loglevel = parse(argv, os.environ)
    # the Celery process reads its settings back from the environment (WorkerSettings.from_env)
    os.environ.update(settings.to_env())
    if settings.snapshot_every_steps is not None:
        os.environ["LOOPWRIGHT_SNAPSHOT_EVERY_STEPS"] = str(settings.snapshot_every_steps)
    if settings.snapshot_every_seconds is not None:
        os.environ["LOOPWRIGHT_SNAPSHOT_EVERY_SECONDS"] = str(settings.snapshot_every_seconds)
    from .celery_app import app, current_runtime

    port = os.environ.get("LOOPWRIGHT_WORKER_METRICS_PORT")
    if port:  # before the base model loads: a slow start is alive, not ready
        from django.conf import settings as django_settings

        from .telemetry import serve

        stale = max(60.0, 6 * django_settings.WORKER_LEASE_SECONDS)
        serve(int(port), current_runtime, stale_after=stale)
    app.worker_main(
        [
            "worker",
            "--queues",
            settings.queue,
            "--pool",
            "solo",
            "--concurrency",
            "1",
            "--prefetch-multiplier",
            "1",
            "--hostname",
            f"{settings.name}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "--loglevel",
            loglevel,
        ]
    )


if __name__ == "__main__":
    main()
