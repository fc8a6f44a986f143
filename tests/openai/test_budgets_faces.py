"""Budgets and keys on the chat faces: a completion from /v1/chat/completions or a message from
/v1/messages is metered under the key that asked for it, and a hard budget on that key refuses
the next one in each face's own error shape, naming the budget."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from controlplane.metering.models import UsageRecord

from .test_api import HI, drained, error_of, v1, world

__all__ = ["drained", "world"]  # fixtures

pytestmark = pytest.mark.django_db


def _key(person) -> tuple[str, APIClient]:
    made = person.post("iam/api-keys", {"name": "chat"}).json()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {made['api_key']}")
    return made["prefix"], client


def test_each_face_meters_under_the_callers_key_and_its_budget_refuses(alice, world) -> None:
    prefix, chat = _key(alice)
    r = alice.post(
        "billing/budgets",
        {"name": "chat-key", "scope": "api_key", "scope_value": prefix, "unit": "tokens",
         "period": "day", "amount": 1},
    )  # fmt: skip
    assert r.status_code == 201, r.content
    body = {"model": world["model"], "messages": HI, "max_tokens": 2}
    first = v1(alice, "chat/completions", body, client=chat)
    assert first.status_code == 200, first.content
    keys = set(UsageRecord.objects.filter(tenant=alice.tenant).values_list("api_key", flat=True))
    assert keys == {prefix}
    err = error_of(v1(alice, "chat/completions", body, client=chat), 402, code="budget_exhausted")
    assert err["type"] == "insufficient_quota" and "budget 'chat-key'" in err["message"]

    anthropic = APIClient()
    anthropic.credentials(HTTP_X_API_KEY=chat._credentials["HTTP_AUTHORIZATION"].split()[1])
    message = {"model": world["model"], "max_tokens": 2, "messages": HI}
    refused = anthropic.post("/v1/messages", message, format="json")
    assert refused.status_code == 402, refused.content
    error = refused.json()["error"]
    assert error["type"] == "billing_error" and "budget 'chat-key'" in error["message"]
    # another key of the account is not counted against it
    ok = alice.client.post("/v1/messages", message, format="json")
    assert ok.status_code == 200, ok.content
    assert UsageRecord.objects.filter(api_key=alice.key.split(".")[0]).exists()
