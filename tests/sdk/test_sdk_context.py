"""Context as a setting in the SDK: a training client's own, or the client's for the sessions
it opens, sent as the wire types check them (a bad one is refused before anything is sent)."""

from __future__ import annotations

import pytest
from fake_server import API_KEY, BASE_MODEL, FAST_RETRY, FakeServer
from pydantic import ValidationError

from loopwright import ServiceClient


def test_a_model_and_a_client_ask_for_their_context(server: FakeServer) -> None:
    with ServiceClient(
        api_key=API_KEY, transport=server.transport, retry=FAST_RETRY, context_length=512
    ) as service:
        service.create_lora_training_client(BASE_MODEL, rank=4, context_length=128)
        service.create_lora_training_client(f"{BASE_MODEL}:peft:256", rank=4)
    sessions = server.calls("create_session")
    models = server.calls("create_model")
    assert [s["context_length"] for s in sessions] == [512, 512]
    assert models[0]["context_length"] == 128 and "context_length" not in models[1]
    assert models[1]["base_model"] == f"{BASE_MODEL}:peft:256"  # the server reads the name


def test_a_context_of_no_tokens_is_refused_before_sending(server: FakeServer) -> None:
    with (
        ServiceClient(api_key=API_KEY, transport=server.transport) as service,
        pytest.raises(ValidationError),
    ):
        service.create_lora_training_client(BASE_MODEL, context_length=0)
    with pytest.raises(ValidationError):
        ServiceClient(
            api_key=API_KEY, transport=server.transport, context_length=-1
        )._open_session()
