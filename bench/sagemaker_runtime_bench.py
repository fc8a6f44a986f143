"""SageMaker runtime overhead: one forward_backward (8 datums × 128 tokens, cross entropy) through
the runtime face (boto3's ``sagemakertrainingsessionruntime`` client: ExecuteTrainingOperation,
then GetTrainingOperationResult until it completes) against the same call through the Tinker
face (its JSON protocol as the tinker SDK speaks it: ``forward_backward``, then
``retrieve_future``), on one stack and one worker, in alternating blocks. Prints p50/p99 of
both and their ratio (target ≤ 1.1).

    python -m bench.sagemaker_runtime_bench [--n 40] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from .report import Row, format_table

DATUMS, TOKENS, RANK = 8, 128, 8
TARGET = 1.1


def batch() -> list[list[int]]:
    return [[(d * 31 + i * 7) % 250 for i in range(TOKENS + 1)] for d in range(DATUMS)]


def time_calls(call, n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        call()
        out.append((time.perf_counter() - start) * 1000)
    return out


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Tinker:
    """The Tinker face as the tinker SDK calls it: submit, then long-poll the future."""

    def __init__(self, stack) -> None:
        import httpx

        self.http = httpx.Client(
            base_url=f"{stack.url}/api/v1", headers={"X-API-Key": stack.keys["alice"]}, timeout=60
        )
        session = self._ok(
            "create_session", {"tags": [], "sdk_version": "bench", "role_arn": stack.roles["alice"]}
        )
        lora = {"rank": RANK, "alpha": 16, "seed": 0}
        body = {"session_id": session["session_id"], "model_seq_id": 0, "base_model": _tiny()}
        self.model_id = self._result(self._ok("create_model", {**body, "lora_config": lora}))[
            "model_id"
        ]
        self.seq = 0
        self.data = [
            {
                "model_input": {"chunks": [{"type": "encoded_text", "tokens": t[:-1]}]},
                "loss_fn_inputs": {
                    "target_tokens": {"data": t[1:], "dtype": "int64"},
                    "weights": {"data": [1.0] * TOKENS, "dtype": "float32"},
                },
            }
            for t in batch()
        ]

    def _ok(self, path: str, body: dict) -> dict:
        r = self.http.post(path, json=body)
        r.raise_for_status()
        return r.json()

    def _result(self, future: dict) -> dict:
        while True:
            r = self.http.post("retrieve_future", json={"request_id": future["request_id"]})
            if r.status_code != 408:
                r.raise_for_status()
                return r.json()

    def forward_backward(self) -> None:
        self.seq += 1
        fwd = {"data": self.data, "loss_fn": "cross_entropy"}
        body = {"model_id": self.model_id, "seq_id": self.seq, "forward_backward_input": fwd}
        assert "loss_fn_outputs" in self._result(self._ok("forward_backward", body))


class SageMaker:
    """The runtime face through boto3: execute, then get until it completes."""

    def __init__(self, stack) -> None:
        import boto3

        pair = json.loads(
            stack.manage(
                "create_access_key", "--account", stack.accounts["alice"], "--role",
                "LoopwrightSessionRole", "--json",
            )
        )  # fmt: skip
        keys = {
            "region_name": "us-east-1",
            "aws_access_key_id": pair["access_key_id"],
            "aws_secret_access_key": pair["secret_access_key"],
        }
        sm = boto3.client("sagemaker", endpoint_url=f"{stack.url}/sagemaker", **keys)
        self.rt = boto3.client(
            "sagemakertrainingsessionruntime", endpoint_url=f"{stack.url}/sagemaker-runtime", **keys
        )
        hub = sm.list_hub_contents(HubName="SageMakerPublicHub", HubContentType="Model")
        sm.create_training_session(
            TrainingSessionName="bench",
            LoraConfig={"Rank": RANK, "Alpha": 16},
            RoleArn=stack.roles["alice"],
            ModelConfig={"BaseModelArn": hub["HubContentSummaries"][0]["HubContentArn"]},
            OutputConfig={"S3Location": {"Path": "s3://bench/out"}},
        )
        while (
            sm.describe_training_session(TrainingSessionName="bench")["TrainingSessionDetail"][
                "TrainingSessionStatus"
            ]
            != "Running"
        ):
            time.sleep(0.2)
        self.seq = 0
        self.data = [
            {
                "modelInput": {"chunks": [{"type": "encoded_text", "tokens": t[:-1]}]},
                "lossFnInputs": {
                    "target_tokens": {"data": t[1:], "dtype": "int64"},
                    "weights": {"data": [1.0] * TOKENS, "dtype": "float32"},
                },
            }
            for t in batch()
        ]

    def forward_backward(self) -> None:
        self.seq += 1
        config = {"forwardBackward": {"lossFnName": "cross_entropy", "datumList": self.data}}
        op = self.rt.execute_training_operation(
            trainingSessionName="bench", sequenceNumber=self.seq, operationConfig=config
        )["operationId"]
        while True:
            out = self.rt.get_training_operation_result(trainingSessionName="bench", operationId=op)
            if out["status"] not in ("Pending", "InProgress"):
                assert out["status"] == "Completed", out
                return


def _tiny() -> str:
    from tests.e2e.stack import TINY

    return TINY


def run(n: int, block: int = 5) -> list[Row]:
    from tests.e2e.stack import Stack

    stack = Stack("postgres-redis", Path(tempfile.mkdtemp(prefix="lw-bench-sm-"))).start()
    try:
        tinker, sagemaker = Tinker(stack), SageMaker(stack)
        for _ in range(2):  # warm both up
            tinker.forward_backward(), sagemaker.forward_backward()
        ours: list[float] = []
        reference: list[float] = []
        while len(reference) < n:
            size = min(block, n - len(reference))
            reference += time_calls(tinker.forward_backward, size)
            ours += time_calls(sagemaker.forward_backward, size)
    finally:
        stack.stop()
    note = f"{DATUMS}×{TOKENS} tokens, cross entropy, LoRA rank {RANK}, {n} calls per face"
    return [
        Row("forward_backward p50 (ms): runtime vs Tinker face", percentile(ours, 0.5),
            percentile(reference, 0.5), "<=", TARGET, note),
        Row("forward_backward p99 (ms): runtime vs Tinker face", percentile(ours, 0.99),
            percentile(reference, 0.99), "<=", 1.5, "tail, for information"),
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> list[Row]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=40, help="timed calls per face")
    p.add_argument("--quick", action="store_true", help="6 calls per face")
    args = p.parse_args(argv)
    n = 6 if args.quick else args.n
    rows = run(n)
    print(f"n={n} load={os.getloadavg()[0]:.1f}")
    print(format_table(rows))
    return rows


if __name__ == "__main__":
    main()
