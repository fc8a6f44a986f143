"""One forward_backward request (64 datums × 2,048 tokens, with sampler logprobs and advantages)
on the wire: JSON against zstd protobuf, in bytes and in client encode + server decode time,
each side up to the request the server validates (the SDK's wire types), from one run.

    python -m bench.wire_bench [--datums 64] [--tokens 2048] [--reps 5]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import time
from collections.abc import Callable

import numpy as np

from loopwright.proto.fwdbwd import encode_forward_backward
from loopwright.types import Datum, ForwardBackwardInput, ForwardBackwardRequest, ModelInput

from .report import parse_with_quick

ANCHOR = "a public Tinker-compatible server measured 41 MB of JSON against 5.5 MB compressed"


def batch(datums: int, tokens: int, seed: int = 0) -> ForwardBackwardInput:
    rng = np.random.default_rng(seed)
    data = []
    for _ in range(datums):
        ids = rng.integers(0, 49_152, size=tokens + 1)
        data.append(
            Datum(
                model_input=ModelInput.from_ints(ids[:-1].tolist()),
                loss_fn_inputs={
                    "target_tokens": ids[1:],
                    "logprobs": -rng.exponential(2.0, size=tokens).astype(np.float32),
                    "advantages": np.repeat(rng.normal(size=1), tokens).astype(np.float32),
                },
            )
        )
    return ForwardBackwardInput(data=data, loss_fn="ppo")


def timed(fn: Callable[[], object], reps: int) -> float:
    """Median seconds of ``reps`` calls, after one to warm up."""
    fn()
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datums", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--reps", type=int, default=5)
    args = parse_with_quick(parser, argv, {"datums": 4, "tokens": 128, "reps": 1})

    # the decoder reads the control plane's settings; a throwaway secret where none is set
    # (it signs nothing here), as for any process pointed at a DATABASE_URL
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(48))
    os.environ.setdefault("LOOPWRIGHT_KMS_MASTER_KEY", secrets.token_urlsafe(48))
    from controlplane.api.protobuf_bodies import decode_forward_backward, decompressed

    fb = batch(args.datums, args.tokens)
    model_id, limit = "model-bench", 1 << 30

    def json_encode() -> bytes:  # what our SDK sends to a JSON server
        body = {"forward_backward_input": fb.model_dump(mode="json"), "model_id": model_id}
        return json.dumps({**body, "seq_id": 1}).encode()

    def proto_encode() -> bytes:
        return encode_forward_backward(model_id, 1, fb)

    as_json, as_proto = json_encode(), proto_encode()

    def json_decode() -> object:  # DRF's JSON parser, then the wire type
        return ForwardBackwardRequest.model_validate(json.loads(as_json))

    def proto_decode() -> object:
        raw = decompressed(as_proto, "zstd", limit)
        return ForwardBackwardRequest.model_validate(decode_forward_backward(raw))

    raw_proto = len(decompressed(as_proto, "zstd", limit))
    rows = [
        ("bytes on the wire", len(as_json), len(as_proto), "B"),
        ("client encode", timed(json_encode, args.reps), timed(proto_encode, args.reps), "s"),
        ("server decode", timed(json_decode, args.reps), timed(proto_decode, args.reps), "s"),
    ]
    tokens = args.datums * args.tokens
    print(f"forward_backward of {args.datums} datums × {args.tokens} tokens ({tokens:,} tokens)")
    print(f"{'':>20} {'JSON':>14} {'zstd protobuf':>14} {'JSON / protobuf':>16}")
    for name, a, b, unit in rows:
        fmt = (
            (lambda v: f"{v / 1e6:11.2f} MB") if unit == "B" else (lambda v: f"{v * 1e3:11.1f} ms")
        )
        print(f"{name:>20} {fmt(a):>14} {fmt(b):>14} {a / b:15.1f}×")
    total_json, total_proto = rows[1][1] + rows[2][1], rows[1][2] + rows[2][2]
    print(
        f"{'encode + decode':>20} {total_json * 1e3:11.1f} ms {total_proto * 1e3:11.1f} ms "
        f"{total_json / total_proto:15.1f}×"
    )
    print(f"protobuf before zstd: {raw_proto / 1e6:.2f} MB; anchor: {ANCHOR}")


if __name__ == "__main__":
    main()
