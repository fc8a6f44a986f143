"""Anthropic's Messages face in process, with the tiny model's worker runtime: the message and
its usage against the usage rows and ``/v1``'s count of the same conversation, stop sequences,
continued assistant turns, the named events of a stream, and every refusal in Anthropic's
shape (IAM, quotas, unknown and another tenant's names, hostile bodies: a 4xx, never a 5xx)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from anthropic.types import Message, MessageTokensCount
from django.utils import timezone
from rest_framework.test import APIClient

from controlplane.audit.models import AuditEvent
from controlplane.completions import services
from controlplane.fleet.models import Worker
from controlplane.metering.models import UsageRecord
from controlplane.metering.rollup import usage_rows_write
from controlplane.quotas import ratelimit
from controlplane.training_sessions.models import Operation, SamplingSession
from tests.support.quotas import set_quota
from tests.support.tiny_worker import TINY
from tests.support.wire import create_model, open_session, result

pytestmark = pytest.mark.django_db

HI = [{"role": "user", "content": "hi"}]
CHAT = [
    {"role": "user", "content": "1+1?"},
    {"role": "assistant", "content": "2"},
    {"role": "user", "content": "2+2?"},
]


@pytest.fixture(autouse=True)
def drained(monkeypatch, runtime):
    """The worker runs what was submitted while the view waits (it is drained, in process)."""

    def wait(op, deadline):
        runtime.drain()
        op.refresh_from_db()
        return op

    monkeypatch.setattr(services, "operation_wait", wait)


def keyed(key: str, header: str = "x-api-key") -> APIClient:
    client = APIClient()
    if header == "bearer":
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    else:
        client.credentials(HTTP_X_API_KEY=key, HTTP_ANTHROPIC_VERSION="2023-06-01")
    return client


def post(person, path: str, body, client: APIClient | None = None, **headers):
    client = client or keyed(person.key)
    return client.post(f"/v1/{path}", body, format="json", **headers)


@pytest.fixture
def world(alice, runtime) -> dict:
    """alice's session with a live model and saved sampler weights (version 1 of its group)."""
    session = open_session(alice)
    model = create_model(alice, runtime, session)
    r = alice.post("save_weights_for_sampler", {"model_id": model, "seq_id": 1, "path": "s1"})
    path = result(alice, runtime, r.json())["path"]
    account = alice.tenant.account_id
    return {
        "session": session,
        "model": model,
        "path": path,
        "arn": f"arn:loopwright:registry::{account}:model-package/run-{model}/1",
    }


def error_of(r, status: int, kind: str, field: str | None = None) -> str:
    """The refusal's message, after checking Anthropic's shape, the status and the type."""
    assert r.status_code == status, r.content
    body = r.json()
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, body
    assert body["error"]["type"] == kind, body
    if field is not None:
        assert body["error"]["message"].startswith(f"{field}:"), body
    return body["error"]["message"]


def usage_of(op_ids: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for row in UsageRecord.objects.filter(operation_id__in=op_ids):
        out[row.meter] = out.get(row.meter, 0) + row.quantity
    return out


def sample_ops() -> list[str]:
    return list(
        Operation.objects.filter(kind="sample").order_by("created_at").values_list("id", flat=True)
    )


def test_a_message_is_billed_as_v1_bills_the_same_conversation(alice, world) -> None:
    body = {"model": world["model"], "max_tokens": 6, "system": "You add.", "messages": CHAT}
    r = post(alice, "messages", body)
    assert r.status_code == 200, r.content
    assert r["request-id"]
    msg = Message.model_validate(r.json())
    (op,) = sample_ops()
    assert msg.id == f"msg_{op}" and msg.model == world["model"] and msg.role == "assistant"
    assert [b.type for b in msg.content] == ["text"]
    assert msg.stop_reason in ("end_turn", "max_tokens") and msg.stop_sequence is None
    assert msg.usage.output_tokens <= 6
    used = usage_of([op])
    assert used["prefill_tokens"] == msg.usage.input_tokens
    assert used["sampled_tokens"] == msg.usage.output_tokens
    # the same conversation on /v1: the same prompt, the same bill
    system = [{"role": "system", "content": "You add."}]
    v1 = {"model": world["model"], "max_tokens": 6, "messages": system + CHAT}
    chat = alice.client.post("/v1/chat/completions", v1, format="json").json()
    assert chat["usage"]["prompt_tokens"] == msg.usage.input_tokens
    first, second = (Operation.objects.get(pk=o) for o in sample_ops())
    assert first.payload["prompt"] == second.payload["prompt"]
    # audited as /v1 audits it: sessions:Sample on the sampler, allowed, with the caller's key
    audited = AuditEvent.objects.filter(action="sessions:Sample").order_by("at")
    (mine, theirs) = audited
    assert (mine.resource, mine.allowed, mine.api_key) == (theirs.resource, True, theirs.api_key)
    assert mine.resource.endswith(f":sampler/{first.sampling_session_id}")
    counted = post(
        alice, "messages/count_tokens", {k: body[k] for k in ("model", "system", "messages")}
    )
    assert MessageTokensCount.model_validate(counted.json()).input_tokens == msg.usage.input_tokens
    assert len(sample_ops()) == 2  # counting samples nothing and bills nothing


def test_bearer_keys_blocks_and_a_system_of_blocks_render_as_strings_do(alice, world) -> None:
    as_text = {"model": world["model"], "system": "be brief", "messages": CHAT}
    as_blocks = {
        "model": world["model"],
        "system": [{"type": "text", "text": "be "}, {"type": "text", "text": "brief"}],
        "messages": [
            {"role": m["role"], "content": [{"type": "text", "text": m["content"]}]} for m in CHAT
        ],
    }
    counts = [
        post(alice, "messages/count_tokens", b, client=keyed(alice.key, "bearer")).json()
        for b in (as_text, as_blocks)
    ]
    assert counts[0] == counts[1] and counts[0]["input_tokens"] > 20
    cached = {
        **as_blocks,
        "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
        "cache_control": {"type": "ephemeral", "ttl": "1h"},  # accepted: nothing is cached
        "speed": "standard",
        "output_config": {"effort": None, "format": None},
        "thinking": {"type": "disabled"},
        "tool_choice": {"type": "none"},
    }
    assert post(alice, "messages/count_tokens", cached).json() == counts[0]


def test_stop_sequences_end_the_text_and_are_echoed(alice, world) -> None:
    ask = {"model": world["model"], "max_tokens": 16, "temperature": 0, "messages": HI}
    free = Message.model_validate(post(alice, "messages", ask).json())
    text = free.content[0].text
    assert free.stop_reason == "max_tokens" and len(text) >= 6, free
    stop = text[3:5]
    cut = post(alice, "messages", {**ask, "stop_sequences": ["never-seen-here", stop]})
    cut = Message.model_validate(cut.json())
    assert cut.stop_reason == "stop_sequence" and cut.stop_sequence == stop
    assert cut.content[0].text == text[: text.index(stop)]
    ops = sample_ops()
    assert cut.usage.output_tokens == usage_of(ops[-1:])["sampled_tokens"]


def test_a_final_assistant_turn_is_continued(alice, world) -> None:
    prefill = [*HI, {"role": "assistant", "content": "The answer is"}]
    r = post(alice, "messages", {"model": world["model"], "max_tokens": 3, "messages": prefill})
    assert r.status_code == 200, r.content
    prompt = Operation.objects.get(kind="sample").payload["prompt"]["chunks"][0]["tokens"]
    assert bytes(prompt[-len(b"The answer is") :]) == b"The answer is"  # the turn stays open
    opened = post(alice, "messages/count_tokens", {"model": world["model"], "messages": HI})
    assert r.json()["usage"]["input_tokens"] == len(prompt)
    assert opened.json()["input_tokens"] < len(prompt)
    err = error_of(
        post(
            alice,
            "messages",
            {
                "model": world["model"],
                "max_tokens": 3,
                "messages": [*HI, {"role": "assistant", "content": "so "}],
            },
        ),
        400,
        "invalid_request_error",
        "messages.1.content",
    )
    assert "trailing whitespace" in err


def events_of(raw: str) -> list[tuple[str, dict]]:
    out = []
    for frame in raw.split("\n\n"):
        if not frame:
            continue
        name, data = frame.split("\n")
        assert name.startswith("event: ") and data.startswith("data: "), frame
        out.append((name[7:], json.loads(data[6:])))
        assert out[-1][0] == out[-1][1]["type"]
    return out


def test_a_stream_sends_anthropics_events_in_order(alice, world) -> None:
    ask = {"model": world["model"], "max_tokens": 8, "temperature": 0, "messages": HI}
    whole = post(alice, "messages", ask).json()
    r = post(alice, "messages", {**ask, "stream": True})
    assert r.status_code == 200 and r["Content-Type"] == "text/event-stream"
    events = events_of(b"".join(r.streaming_content).decode())
    names = [name for name, _ in events]
    deltas = [i for i, n in enumerate(names) if n == "content_block_delta"]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[3 + len(deltas) :] == ["content_block_stop", "message_delta", "message_stop"]
    assert deltas == list(range(3, 3 + len(deltas)))
    start = events[0][1]["message"]
    assert start["usage"]["input_tokens"] == whole["usage"]["input_tokens"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert (
        "".join(e["delta"]["text"] for _, e in events if e["type"] == "content_block_delta")
        == whole["content"][0]["text"]
    )
    delta = events[-2][1]
    assert delta["delta"] == {"stop_reason": whole["stop_reason"], "stop_sequence": None}
    assert delta["usage"]["output_tokens"] == whole["usage"]["output_tokens"]


def test_unknown_and_another_tenants_names_are_404(alice, charlie, world) -> None:
    post(alice, "messages", {"model": world["path"], "max_tokens": 1, "messages": HI})
    world["sampler"] = SamplingSession.objects.get().id
    before = Operation.objects.count(), SamplingSession.objects.count()
    names = [world[k] for k in ("session", "model", "path", "arn", "sampler")]
    for name in [*names, "claude-sonnet-4-5", "tinker://model-x/sampler_weights/y"]:
        for path, extra in (("messages", {"max_tokens": 4}), ("messages/count_tokens", {})):
            r = post(charlie, path, {"model": name, "messages": HI, **extra})
            message = error_of(r, 404, "not_found_error", "model")
            # the same answer as for a name that never existed
            assert message.endswith("does not exist or you do not have access to it."), message
    assert (Operation.objects.count(), SamplingSession.objects.count()) == before


def test_keys(alice, world) -> None:
    body = {"model": world["model"], "max_tokens": 2, "messages": HI}
    error_of(post(alice, "messages", body, client=APIClient()), 401, "authentication_error")
    error_of(post(alice, "messages", body, client=keyed("tml-nope")), 401, "authentication_error")
    error_of(
        post(
            alice, "messages/count_tokens", {"model": "m", "messages": HI}, client=keyed("x" * 5000)
        ),
        401,
        "authentication_error",
    )
    assert post(alice, "messages", body, client=keyed(alice.key, "bearer")).status_code == 200


BAD = [
    ({"model": "m", "messages": HI}, "max_tokens", "Field required"),
    ({"model": "m", "max_tokens": 0, "messages": HI}, "max_tokens", None),
    ({"model": "m", "max_tokens": 2**40, "messages": HI}, "max_tokens", None),
    ({"max_tokens": 4, "messages": HI}, "model", None),
    ({"model": "m", "max_tokens": 4, "messages": []}, "messages", None),
    ({"model": "m", "max_tokens": 4}, "messages", None),
    (
        {"model": "m", "max_tokens": 4, "messages": [{"role": "system", "content": "x"}]},
        "messages.0.role",
        None,
    ),
    ({"model": "m", "max_tokens": 4, "messages": HI, "temperature": 1.5}, "temperature", None),
    ({"model": "m", "max_tokens": 4, "messages": HI, "top_p": 0}, "top_p", None),
    ({"model": "m", "max_tokens": 4, "messages": HI, "top_k": -1}, "top_k", None),
    (
        {"model": "m", "max_tokens": 4, "messages": HI, "stop_sequences": [""]},
        "stop_sequences.0",
        None,
    ),
    (
        {"model": "m", "max_tokens": 4, "messages": HI, "stop_sequences": ["x"] * 17},
        "stop_sequences",
        None,
    ),
    (
        {"model": "m", "max_tokens": 4, "messages": HI, "stop_sequences": ["x" * 1001]},
        "stop_sequences.0",
        None,
    ),
    (
        {
            "model": "m",
            "max_tokens": 4,
            "messages": HI,
            "tools": [{"name": "f", "input_schema": {}}],
        },
        "tools",
        "tool use",
    ),
    (
        {"model": "m", "max_tokens": 4, "messages": HI, "tool_choice": {"type": "auto"}},
        "tool_choice",
        None,
    ),
    (
        {
            "model": "m",
            "max_tokens": 4,
            "messages": HI,
            "thinking": {"type": "enabled", "budget_tokens": 1024},
        },
        "thinking",
        "thinking",
    ),
    (
        {"model": "m", "max_tokens": 4, "messages": HI, "mcp_servers": [{"type": "url"}]},
        "mcp_servers",
        None,
    ),
    ({"model": "m", "max_tokens": 4, "messages": HI, "container": "c"}, "container", None),
    ({"model": "m", "max_tokens": 4, "messages": HI, "inference_geo": "us"}, "inference_geo", None),
    (
        {
            "model": "m",
            "max_tokens": 4,
            "messages": HI,
            "diagnostics": {"previous_message_id": None},
        },
        "diagnostics",
        None,
    ),
    ({"model": "m", "max_tokens": 4, "messages": HI, "speed": "fast"}, "speed", None),
    (
        {
            "model": "m",
            "max_tokens": 4,
            "messages": HI,
            "output_config": {"format": {"type": "json_schema", "schema": {}}},
        },
        "output_config.format",
        "not supported",
    ),
    (
        {"model": "m", "max_tokens": 4, "messages": HI, "output_config": {"effort": "high"}},
        "output_config.effort",
        None,
    ),
    (
        {"model": "m", "max_tokens": 4, "messages": HI, "metadata": {"user_id": "u" * 257}},
        "metadata.user_id",
        None,
    ),
    (
        {"model": "m", "max_tokens": 4, "messages": HI, "metadata": {"tier": "gold"}},
        "metadata.tier",
        "Extra inputs",
    ),
    (
        {"model": "m", "max_tokens": 4, "messages": HI, "seed": 1},
        "seed",
        "Extra inputs are not permitted",
    ),
    (
        {
            "model": "m",
            "max_tokens": 4,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "a"},
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "AA=="},
                        },
                    ],
                }
            ],
        },
        "messages.0.content.1.type",
        "image",
    ),
    (
        {
            "model": "m",
            "max_tokens": 4,
            "messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}],
        },
        "messages.0.content.0.type",
        "document",
    ),
    (
        {
            "model": "m",
            "max_tokens": 4,
            "messages": [
                *HI,
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
                },
            ],
        },
        "messages.1.content.0.type",
        "tool use",
    ),
    (
        {"model": "m", "max_tokens": 4, "system": [{"type": "image"}], "messages": HI},
        "system.0.type",
        None,
    ),
    (
        {
            "model": "m",
            "max_tokens": 4,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "a", "citations": [{"type": "char_location"}]}
                    ],
                }
            ],
        },
        "messages.0.content.0.citations",
        "citations",
    ),
    (
        {
            "model": "m",
            "max_tokens": 4,
            "messages": [{"role": "user", "content": [{"type": "text"}]}],
        },
        "messages.0.content.0.text",
        "Field required",
    ),
]


@pytest.mark.parametrize(("body", "field", "words"), BAD)
def test_bad_requests_name_the_field(alice, body, field, words) -> None:
    message = error_of(post(alice, "messages", body), 400, "invalid_request_error", field)
    if words is not None:
        assert words in message, message
    assert not Operation.objects.exists()


def test_hostile_bodies_are_4xx(alice, world) -> None:
    client = keyed(alice.key)
    deep = {"type": "text", "text": "x"}
    for _ in range(300):
        deep = [deep]
    bodies = [
        b'{"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "\xff\xfe"}]}',
        json.dumps(
            {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": deep}]}
        ),
        json.dumps(
            {
                "model": "m",
                "max_tokens": 4,
                "messages": [{"role": "user", "content": [[[{"type": "text", "text": "x"}]]]}],
            }
        ),
        json.dumps(
            {
                "model": "m",
                "max_tokens": 4,
                "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}] * 5000}],
                "top_k": 1e999,
            }
        ),
        '{"model": "m", "max_tokens": 99999999999999999999999, "messages": []}',
        "[1, 2]",
        "",
        "not json",
    ]
    for raw in bodies:
        r = client.post("/v1/messages", raw, content_type="application/json")
        assert 400 <= r.status_code < 500, (raw[:80], r.content)
        assert r.json()["type"] == "error" and r.json()["error"]["type"] == "invalid_request_error"
    r = post(alice, "messages", {"model": world["model"], "max_tokens": 5000, "messages": HI})
    assert "maximum context length is 1024 tokens" in error_of(
        r, 400, "invalid_request_error", "max_tokens"
    )
    long = [{"role": "user", "content": "x" * 1100}]
    error_of(
        post(alice, "messages", {"model": world["model"], "max_tokens": 1, "messages": long}),
        400,
        "invalid_request_error",
        "messages",
    )
    r = client.get("/v1/messages")
    assert r.status_code == 405 and r.json()["error"]["type"] == "invalid_request_error"
    r = client.post("/v1/messages/batches", {}, format="json")
    assert r.status_code == 404 and r.json() == {
        "type": "error",
        "error": {"type": "not_found_error", "message": "no such route"},
    }
    assert not Operation.objects.filter(kind="sample").exists()


def test_an_inline_deny_of_sample_is_a_403(alice, bob, world) -> None:
    deny = {
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "No", "Effect": "Deny", "Action": "sessions:Sample", "Resource": "*"}
        ],
    }
    r = alice.client.put(
        "/api/v1/iam/users/bob@example.com/policies/no-sampling", {"document": deny}, format="json"
    )
    assert r.status_code == 200, r.content
    body = {"model": world["model"], "max_tokens": 2, "messages": HI}
    for path in ("messages", "messages/count_tokens"):
        ask = body if path == "messages" else {"model": world["model"], "messages": HI}
        assert "sessions:Sample" in error_of(post(bob, path, ask), 403, "permission_error")
    assert post(alice, "messages", body).status_code == 200


def test_the_monthly_budget_is_a_402(alice, world) -> None:
    set_quota(alice, "--monthly-token-budget", "10")
    usage_rows_write(
        [
            UsageRecord(
                tenant=alice.tenant,
                session_id=world["session"],
                base_model=TINY,
                meter="train_tokens",
                quantity=10,
                occurred_at=timezone.now(),
            )
        ]
    )
    r = post(alice, "messages", {"model": world["model"], "max_tokens": 2, "messages": HI})
    error_of(r, 402, "billing_error")


def test_the_request_rate_is_a_429_with_retry_after(alice, world, monkeypatch) -> None:
    monkeypatch.setattr(ratelimit, "_clock", lambda: 1_800_000_000.0)  # a window's first second
    set_quota(alice, "--requests-per-minute", "1")
    assert (
        post(alice, "messages/count_tokens", {"model": world["model"], "messages": HI}).status_code
        == 200
    )
    r = post(alice, "messages", {"model": world["model"], "max_tokens": 2, "messages": HI})
    error_of(r, 429, "rate_limit_error")
    assert r["Retry-After"] == "60"


def test_no_worker_for_the_sessions_network_is_529_overloaded(alice, world) -> None:
    Worker.objects.update(
        lease_expires_at=timezone.now() + timedelta(seconds=600), subnet_ids=["subnet-0abc1234"]
    )
    r = post(alice, "messages", {"model": world["path"], "max_tokens": 2, "messages": HI})
    error_of(r, 529, "overloaded_error")
    assert int(r["Retry-After"]) > 0


def test_a_retry_with_its_idempotency_key_runs_and_meters_once(alice, world) -> None:
    body = {"model": world["model"], "max_tokens": 3, "messages": HI}
    key = {"HTTP_IDEMPOTENCY_KEY": "anthropic-retry-1"}
    first = post(alice, "messages", body, **key)
    again = post(alice, "messages", body, **key)
    assert first.status_code == 200 and again.json() == first.json()
    assert len(sample_ops()) == 1
    other = post(alice, "messages", {**body, "max_tokens": 4}, **key)
    assert "Idempotency-Key" in error_of(other, 409, "invalid_request_error")


def test_a_body_over_the_size_limit_is_413_request_too_large(alice, settings) -> None:
    settings.MAX_REQUEST_BYTES = 1000
    big = [{"role": "user", "content": "x" * 2000}]
    r = post(alice, "messages", {"model": "m", "max_tokens": 1, "messages": big})
    assert "exceeds the limit of 1000 bytes" in error_of(r, 413, "request_too_large")
    r = alice.client.post("/api/v1/asample", {"x": "y" * 2000}, format="json")
    assert r.status_code == 413 and r.json()["code"] == "payload_too_large"
