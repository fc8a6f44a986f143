"""The embedded default end to end, as ``make serve`` runs it: ``manage.py serve`` with no
DATABASE_URL, no broker URL and no secret in its environment (SQLite, the filesystem broker and
its own secrets in a fresh data folder), the tiny model's worker, and a short training loop
through the SDK with the key and role the service wrote for its local account.

``make smoke`` (``python -m tests.e2e.serve_smoke``; CI runs it) exits non-zero on any failure:
a loop step that fails or hangs, samples of the wrong length, a loss that does not go down on
the batch it trains on, or a line in the service's log saying the database was locked.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from loopwright import ServiceClient
from loopwright.types import AdamParams, Datum, ModelInput, SamplingParams
from tests.e2e.stack import TINY, ServeStack

STEPS = 4


def batch(tokenizer) -> list[Datum]:
    data = []
    for text in ("2 + 2 = 4", "3 + 5 = 8", "7 - 1 = 6", "9 + 0 = 9"):
        ids = tokenizer.encode(text)
        data.append(
            Datum(
                model_input=ModelInput.from_ints(ids[:-1]),
                loss_fn_inputs={"target_tokens": ids[1:], "weights": [1.0] * (len(ids) - 1)},
            )
        )
    return data


def loop(stack: ServeStack) -> list[float]:
    """forward_backward, optim_step and a sample of the new weights, ``STEPS`` times; returns
    the summed loss of each step."""
    losses = []
    with ServiceClient(
        base_url=stack.url, api_key=stack.keys["alice"], role_arn=stack.roles["alice"]
    ) as svc:
        names = [m.name for m in svc.list_base_models()]
        assert names == [TINY], names
        tc = svc.create_lora_training_client(TINY, rank=4, seed=0)
        tokenizer = tc.get_tokenizer()
        data = batch(tokenizer)
        prompt = ModelInput.from_ints(tokenizer.encode("2 + 2 ="))
        for step in range(STEPS):
            fb = tc.forward_backward(data, loss_fn="cross_entropy")
            optim = tc.optim_step(AdamParams(learning_rate=5e-2))  # sent before fb finishes
            losses.append(fb.result().metrics["loss:sum"])
            assert optim.result().metrics is not None
            sampler = tc.save_weights_and_get_sampling_client()
            res = sampler.sample(
                prompt, num_samples=2, sampling_params=SamplingParams(max_tokens=6, stop=[])
            ).result()
            lengths = [len(s.tokens) for s in res.sequences]
            assert lengths == [6, 6], lengths
            print(f"step {step + 1}: loss {losses[-1]:.3f}, sampled {lengths}", flush=True)
        saved = tc.save_state("smoke").result().path
        assert saved.endswith("/weights/smoke"), saved
    return losses


def main() -> int:
    began = time.monotonic()
    data_dir = Path(tempfile.mkdtemp(prefix="lw-serve-smoke-"))
    stack = ServeStack(data_dir)
    stack.env.pop("LOOPWRIGHT_BROKER_URL", None)  # the default decides, as for make serve
    stack.env.pop("LOOPWRIGHT_LONG_POLL_SECONDS", None)
    try:
        stack.start()
        print(f"manage.py serve up at {stack.url} ({time.monotonic() - began:.0f} s)", flush=True)
        losses = loop(stack)
    except BaseException:
        print(stack.logs()[-6000:], file=sys.stderr)
        raise
    finally:
        stack.stop()
    assert (data_dir / "loopwright.sqlite3").exists(), "no SQLite file in the data folder"
    assert (data_dir / "broker").is_dir(), "no filesystem broker in the data folder"
    assert losses[-1] < losses[0], f"the loss did not go down on its own batch: {losses}"
    locked = [line for line in stack.logs().splitlines() if "database is locked" in line
              or "database table is locked" in line]  # fmt: skip
    assert not locked, locked[:5]
    print(f"serve smoke: ok in {time.monotonic() - began:.0f} s (losses {losses})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
