"""The user's loop of the multi-host test, run on the client host (a process in its network
namespace): the seeded steps of tests/e2e/seeded_loop.py, pausing where the test asks so
that it can cut a link, then the final state downloaded and the samples and usage written out.

    python -m tests.e2e.multihost_loop URL KEY ROLE OUT [--pause between:2 ...] [--replicas N]

At each pause it prints ``PAUSE <point> <step> <model_id>`` and waits for a line on stdin.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import httpx

from loopwright import ServiceClient

from .seeded_loop import STEPS, download_final, train_step

TINY = "loopwright/tiny-byte-llama"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("key")
    p.add_argument("role")
    p.add_argument("out", type=Path)
    p.add_argument("--pause", action="append", default=[])
    p.add_argument("--replicas", type=int, default=None)
    args = p.parse_args()
    pauses = {tuple(x.split(":")) for x in args.pause}

    samples = []
    with ServiceClient(base_url=args.url, api_key=args.key, role_arn=args.role) as svc:
        tc = svc.create_lora_training_client(TINY, rank=8, seed=11, replicas=args.replicas)

        def at(point: str, step: int, **_) -> None:
            if (point, str(step)) in pauses:
                print(f"PAUSE {point} {step} {tc.model_id}", flush=True)
                sys.stdin.readline()

        for step in range(STEPS):
            _, sampled = train_step(tc, step, at)
            if sampled is not None:
                samples.append(sampled)
        folder = download_final(svc, tc, args.out / "state")
        session_id = tc.session_id
        tc.stop()
    r = httpx.get(f"{args.url}/api/v1/sessions/{session_id}/usage", headers={"X-API-Key": args.key})
    usage = {line["meter"]: line["quantity"] for line in r.json()["lines"]}
    r = httpx.get(f"{args.url}/api/v1/sessions/{session_id}", headers={"X-API-Key": args.key})
    result = {
        "session_id": session_id,
        "samples": samples,
        "usage": usage,
        "recoveries": r.json()["recoveries"],
        "state": str(folder),
    }
    (args.out / "result.json").write_text(json.dumps(result))
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
