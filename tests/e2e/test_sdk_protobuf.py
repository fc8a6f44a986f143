"""Our SDK sends forward and forward_backward as zstd protobuf to a server that offers it
(``client/config``) and gets the same numbers the JSON protocol gives; charlie gets 404."""

from __future__ import annotations

import httpx
import pytest

from loopwright import NotFoundError, ServiceClient
from loopwright.types import AdamParams, Datum, ModelInput

from .stack import TINY

pytestmark = pytest.mark.e2e


class Recording(httpx.AsyncHTTPTransport):
    """The real transport, noting each request's path and body headers."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, str, str]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(
            (
                request.url.path.removeprefix("/api/v1/"),
                request.headers.get("content-type", ""),
                request.headers.get("content-encoding", ""),
            )
        )
        return await super().handle_async_request(request)


def datums() -> list[Datum]:
    tokens = [72, 101, 108, 108, 111, 32, 119, 111, 114, 108, 100]
    return [
        Datum(
            model_input=ModelInput.from_ints(tokens[i:-1]),
            loss_fn_inputs={"target_tokens": tokens[i + 1 :], "weights": [0.5] * (10 - i)},
        )
        for i in range(3)
    ]


def test_forward_backward_goes_as_zstd_protobuf(pg_stack) -> None:
    transport = Recording()
    key, role = pg_stack.keys["alice"], pg_stack.roles["alice"]
    with ServiceClient(
        base_url=pg_stack.url, api_key=key, role_arn=role, transport=transport
    ) as svc:
        tc = svc.create_lora_training_client(TINY, rank=4, seed=0)
        before = tc.forward(datums()).result()
        tc.forward_backward(datums(), "cross_entropy").result()
        after_fb = tc.forward(datums()).result()  # a forward_only pass touched nothing
        tc.optim_step(AdamParams(learning_rate=1e-2)).result()
        after = tc.forward(datums()).result()
        # the same batch as JSON on the same route gives the same numbers
        body = {
            "model_id": tc.model_id,
            "seq_id": 6,
            "forward_input": {
                "data": [d.model_dump(mode="json") for d in datums()],
                "loss_fn": "cross_entropy",
            },
        }
        headers = {"X-API-Key": key}
        fut = httpx.post(f"{pg_stack.url}/api/v1/forward", json=body, headers=headers).json()
        as_json = httpx.post(
            f"{pg_stack.url}/api/v1/retrieve_future",
            json={"request_id": fut["request_id"]},
            headers=headers,
            timeout=30,
        ).json()
        charlie = ServiceClient(base_url=pg_stack.url, api_key=pg_stack.role_key("charlie"))
        with charlie, pytest.raises(NotFoundError):
            charlie.create_training_client(tc.model_id)
    sent = [s for s in transport.seen if s[0] in ("forward", "forward_backward")]
    assert len(sent) == 4
    assert all(s == ("forward_backward", "application/x-protobuf", "zstd") for s in sent), sent
    assert before.metrics["loss:sum"] == after_fb.metrics["loss:sum"]
    assert after.metrics["loss:sum"] < before.metrics["loss:sum"]
    assert as_json["metrics"]["loss:sum"] == pytest.approx(after.metrics["loss:sum"], rel=1e-6)
