"""Envelope benchmark: LWENC1 seal/open of one blob against plain AES-256-GCM over it in one call.

Each row is one run: a warm-up, then the median of several alternating repetitions per side.

    python -m bench.envelope_bench [--mib 64] [--chunk-size 1048576] [--reps 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from controlplane.kms.envelope import open_bytes, open_file, seal_bytes, seal_file
from controlplane.kms.keyring import LocalKeyProvider, MasterKey, new_local_key

from .report import MIB, Row, format_table, parse_with_quick

CONTEXT = {"tenant": "bench", "resource": "arn:loopwright:checkpoint::bench:ckpt/1"}
TARGET = 0.90  # the envelope may cost at most a tenth of the raw cipher's throughput


def time_pair(
    ours: Callable[[], object], ref: Callable[[], object], reps: int
) -> tuple[float, float]:
    """Median seconds per call of each side: one warm-up each, then alternating repetitions."""
    ours(), ref()
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(reps):
        for side, fn in enumerate((ours, ref)):
            start = time.perf_counter()
            fn()
            times[side].append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1])


def write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def run(mib: int, chunk_size: int, reps: int) -> list[Row]:
    master = MasterKey("benchmark master key")
    key = new_local_key("000000000000", master)
    provider = LocalKeyProvider(master)
    data = os.urandom(mib * MIB)
    aead, nonce = AESGCM(AESGCM.generate_key(256)), os.urandom(12)
    raw = aead.encrypt(nonce, data, None)
    sealed = seal_bytes(data, key=key, provider=provider, context=CONTEXT, chunk_size=chunk_size)
    opener: dict[str, Any] = {
        "key_lookup": lambda arn: key,
        "provider_for_key": lambda k: provider,
        "expected_context": CONTEXT,
    }

    def row(metric: str, ours: Callable[[], object], ref: Callable[[], object], note: str) -> Row:
        t_ours, t_ref = time_pair(ours, ref, reps)
        note = f"{note}; median of {reps}: {t_ours:.3f}s vs {t_ref:.3f}s"
        return Row(metric, mib / t_ours, mib / t_ref, ">=", TARGET, note)

    rows = [
        row(
            f"seal_bytes {mib} MiB (MiB/s)",
            lambda: seal_bytes(
                data, key=key, provider=provider, context=CONTEXT, chunk_size=chunk_size
            ),
            lambda: aead.encrypt(nonce, data, None),
            "reference: AESGCM.encrypt over the whole blob in one call",
        ),
        row(
            f"open_bytes {mib} MiB (MiB/s)",
            lambda: open_bytes(sealed, **opener),
            lambda: aead.decrypt(nonce, raw, None),
            "reference: AESGCM.decrypt over the whole blob in one call",
        ),
    ]
    with tempfile.TemporaryDirectory(prefix="lw-envelope-bench-") as tmp:
        plain, out, ref_out = Path(tmp, "plain"), Path(tmp, "out"), Path(tmp, "ref")
        plain.write_bytes(data)
        Path(tmp, "sealed").write_bytes(sealed)
        Path(tmp, "raw").write_bytes(raw)
        file_note = "reference: read, one AESGCM call, write + fsync; page cache warm"
        rows.append(
            row(
                f"seal_file {mib} MiB (MiB/s)",
                lambda: seal_file(
                    plain, out, key=key, provider=provider, context=CONTEXT, chunk_size=chunk_size
                ),
                lambda: write_synced(ref_out, aead.encrypt(nonce, plain.read_bytes(), None)),
                file_note,
            )
        )
        rows.append(
            row(
                f"open_file {mib} MiB (MiB/s)",
                lambda: open_file(Path(tmp, "sealed"), out, **opener),
                lambda: write_synced(
                    ref_out, aead.decrypt(nonce, Path(tmp, "raw").read_bytes(), None)
                ),
                file_note,
            )
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mib", type=int, default=64, help="blob size in MiB")
    p.add_argument("--chunk-size", type=int, default=1 << 20, help="LWENC1 chunk size in bytes")
    p.add_argument("--reps", type=int, default=5, help="timed repetitions per side")
    args = parse_with_quick(p, argv, {"mib": 1, "chunk_size": 1 << 16, "reps": 1})
    load = os.getloadavg()[0]
    print(f"blob={args.mib} MiB chunk_size={args.chunk_size} reps={args.reps} load={load:.1f}")
    print(format_table(run(args.mib, args.chunk_size, args.reps)))


if __name__ == "__main__":
    main()
