"""The wire protocol as tests speak it: bodies, sessions, models and their futures."""

from __future__ import annotations

from collections.abc import Sequence

from tests.support.tiny_worker import TINY


def datum(
    tokens: list[int], targets: list[int] | None = None, weights: list[float] | None = None
) -> dict:
    targets = targets if targets is not None else [(t + 1) % 256 for t in tokens]
    return {
        "model_input": {"chunks": [{"type": "encoded_text", "tokens": tokens}]},
        "loss_fn_inputs": {
            "target_tokens": {"data": targets, "dtype": "int64"},
            "weights": {"data": weights or [1.0] * len(tokens), "dtype": "float32"},
        },
    }


def fwdbwd(model_id: str, seq_id: int, data: list[dict], loss_fn: str = "cross_entropy") -> dict:
    return {
        "model_id": model_id,
        "seq_id": seq_id,
        "forward_backward_input": {"data": data, "loss_fn": loss_fn},
    }


def open_session(person, *, tags: Sequence[str] = ("t",), **platform) -> str:
    """A new session of ``person``'s, tagged ``tags``; ``platform`` adds the create_session
    fields a test sets (``s3_output_path``, ``kms_key_arn``, ...)."""
    body = {"tags": list(tags), "sdk_version": "test", "role_arn": person.role_arn, **platform}
    r = person.post("create_session", body)
    assert r.status_code == 200, r.content
    return r.json()["session_id"]


def create_model(person, runtime, session_id: str, seq: int = 0, rank: int = 4) -> str:
    r = person.post(
        "create_model",
        {
            "session_id": session_id,
            "model_seq_id": seq,
            "base_model": TINY,
            "lora_config": {"rank": rank, "seed": 0},
        },
    )
    assert r.status_code == 200, r.content
    fut = r.json()
    assert result(person, runtime, fut) == {"model_id": fut["model_id"]}
    return fut["model_id"]


def result(person, runtime, fut: dict) -> dict:
    """Let the worker run what is runnable, then read the future."""
    runtime.drain()
    r = person.post("retrieve_future", {"request_id": fut["request_id"]})
    assert r.status_code == 200, (r.status_code, r.content)
    return r.json()


class ModelRun:
    """One training model of a person's session, numbering its requests."""

    def __init__(self, person, runtime, session_id: str, seq: int = 0) -> None:
        self.person, self.runtime = person, runtime
        self.id = create_model(person, runtime, session_id, seq=seq)
        self.seq = 0

    def submit(self, endpoint: str, /, **body):
        self.seq += 1
        return self.person.post(endpoint, {"model_id": self.id, "seq_id": self.seq, **body})

    def run(self, endpoint: str, /, **body) -> dict:
        r = self.submit(endpoint, **body)
        assert r.status_code == 200, r.content
        return result(self.person, self.runtime, r.json())
