"""vpc_config is checked client-side, as the server checks it, before anything is sent; a
request held while its model waits for a worker says why, once."""

from __future__ import annotations

import logging

import pytest
from fake_server import API_KEY, BASE_MODEL, FAST_RETRY, FakeServer
from pydantic import ValidationError

from loopwright import ServiceClient
from loopwright.types import CreateSessionRequest, VpcConfig

GOOD = {"subnets": ["subnet-0a1b2c3d"], "security_group_ids": ["sg-0a1b2c3d4e5f60718"]}


def test_the_client_level_setting_is_checked_at_construction(server: FakeServer) -> None:
    bad = {**GOOD, "subnets": ["subnet-0a1b2c3d", "subnet-0a1b2c3d"]}
    with pytest.raises(ValidationError, match=r"listed twice, at \[0\] and \[1\]"):
        ServiceClient(api_key=API_KEY, transport=server.transport, vpc_config=bad)
    assert server.log == []


def test_a_per_session_setting_is_checked_before_the_session_opens(server: FakeServer) -> None:
    with ServiceClient(api_key=API_KEY, transport=server.transport, vpc_config=GOOD) as service:
        with pytest.raises(ValidationError) as raised:
            service.create_lora_training_client(
                BASE_MODEL, vpc_config={"subnets": ["subnet-0a1b2c3d"], "security_group_ids": ["x"]}
            )
        assert raised.value.errors()[0]["loc"] == ("vpc_config", "security_group_ids", 0)
        assert server.log == []
        client = service.create_lora_training_client(BASE_MODEL, vpc_config=VpcConfig(**GOOD))
        assert server.sessions[client.session_id]["vpc_config"] == GOOD


def test_the_wire_type_names_the_limits() -> None:
    many = {**GOOD, "subnets": [f"subnet-{i:08x}" for i in range(17)]}
    with pytest.raises(ValidationError, match="must hold 1 to 16 subnet ids, got 17"):
        CreateSessionRequest(tags=[], sdk_version="x", vpc_config=many)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        VpcConfig.model_validate({**GOOD, "subnet_ids": GOOD["subnets"]})


def test_a_held_request_says_why_once(server: FakeServer, caplog: pytest.LogCaptureFixture) -> None:
    reason = "waiting for a worker that reaches subnet-0a1b2c3d with sg-0a1b2c3d4e5f60718: ..."
    held = {"type": "try_again", "request_id": "r", "queue_state": "paused_capacity"}
    server.fail_http("retrieve_future", 408, times=3, body={**held, "queue_state_reason": reason})
    with (
        caplog.at_level(logging.WARNING, logger="loopwright"),
        ServiceClient(api_key=API_KEY, transport=server.transport, retry=FAST_RETRY) as service,
    ):
        service.create_lora_training_client(BASE_MODEL, vpc_config=GOOD)
    told = [r.getMessage() for r in caplog.records if "is held" in r.getMessage()]
    assert len(told) == 1 and told[0].endswith(reason)
