"""The user's loop of the multi-host test, run on the client host (a process in its network
namespace): the seeded steps of tests/e2e/test_failover_e2e.py, pausing where the test asks so
that it can cut a link, then the final state downloaded and the samples and usage written out.

    python -m tests.e2e.multihost_loop URL KEY ROLE OUT [--pause between:2 ...]

At each pause it prints ``PAUSE <point> <step> <model_id>`` and waits for a line on stdin.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import httpx

from loopwright import ServiceClient
from loopwright.types import AdamParams, Datum, ModelInput, SamplingParams

TINY = "loopwright/tiny-byte-llama"
STEPS = 8


def batch(step: int) -> list[Datum]:
    """16 datums of 96 tokens (as test_failover_e2e.batch)."""
    data = []
    for row in range(16):
        tokens = [(step * 31 + row * 17 + i * 7) % 250 for i in range(97)]
        data.append(
            Datum(
                model_input=ModelInput.from_ints(tokens[:-1]),
                loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * 96},
            )
        )
    return data


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("key")
    p.add_argument("role")
    p.add_argument("out", type=Path)
    p.add_argument("--pause", action="append", default=[])
    args = p.parse_args()
    pauses = {tuple(x.split(":")) for x in args.pause}

    samples = []
    with ServiceClient(base_url=args.url, api_key=args.key, role_arn=args.role) as svc:
        tc = svc.create_lora_training_client(TINY, rank=8, seed=11)

        def at(point: str, step: int) -> None:
            if (point, str(step)) in pauses:
                print(f"PAUSE {point} {step} {tc.model_id}", flush=True)
                sys.stdin.readline()

        for step in range(STEPS):
            tc.forward_backward(batch(step), "cross_entropy").result()
            at("between", step)
            tc.optim_step(AdamParams(learning_rate=5e-3)).result()
            if step % 4 == 3:
                tc.save_state(f"s{step}").result()
                sampler = tc.save_weights_and_get_sampling_client(f"w{step}")
                params = SamplingParams(max_tokens=64, seed=step, stop=[])
                out = sampler.sample(ModelInput.from_ints([1, 2, 3, 4]), 4, params)
                samples.append([s.tokens for s in out.result().sequences])
        final = tc.save_state("final").result().path
        folder = svc.download_model_package(final, args.out / "state", include_optimizer=True)
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
