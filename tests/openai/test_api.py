"""The /v1/ endpoints in process, with the tiny model's worker runtime: model names, errors in
OpenAI's shape, IAM, quotas, metering, and charlie never reaching anything of alice's."""

from __future__ import annotations

import pytest
from django.urls import URLPattern
from django.utils import timezone
from openai.types import Completion
from openai.types.chat import ChatCompletion
from rest_framework.test import APIClient

from controlplane.completions import services
from controlplane.metering.models import UsageRecord
from controlplane.metering.rollup import usage_rows_write
from controlplane.openai_api.urls import urlpatterns
from controlplane.quotas import ratelimit
from controlplane.training_sessions.models import Operation, SamplingSession
from tests.support.quotas import set_quota
from tests.support.tiny_worker import TINY
from tests.support.wire import create_model, open_session, result

pytestmark = pytest.mark.django_db

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(autouse=True)
def drained(monkeypatch, runtime):
    """The worker runs what was submitted while the view waits (it is drained, in process)."""

    def wait(op, deadline):
        runtime.drain()
        op.refresh_from_db()
        return op

    monkeypatch.setattr(services, "operation_wait", wait)


def v1(person, path: str, body: dict | None = None, client: APIClient | None = None):
    client = client or person.client
    if body is None:
        return client.get(f"/v1/{path}")
    return client.post(f"/v1/{path}", body, format="json")


def bearer(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


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


def error_of(r, status: int, param: str | None = None, code: str | None = None) -> dict:
    assert r.status_code == status, r.content
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    assert err["param"] == param, err
    if code is not None:
        assert err["code"] == code, err
    return err


def usage_of(op_ids: list[str]) -> dict[str, int]:
    rows = UsageRecord.objects.filter(operation_id__in=op_ids)
    out: dict[str, int] = {}
    for row in rows:
        out[row.meter] = out.get(row.meter, 0) + row.quantity
    return out


def test_chat_on_a_live_model_with_a_bearer_key(alice, world) -> None:
    r = v1(
        alice,
        "chat/completions",
        {"model": world["model"], "messages": HI, "max_tokens": 5, "n": 2, "seed": 3},
        client=bearer(alice.key),
    )
    assert r.status_code == 200, r.content
    body = ChatCompletion.model_validate(r.json())
    assert len(body.choices) == 2 and body.model == world["model"]
    ops = list(Operation.objects.filter(kind="sample").values_list("id", flat=True))
    assert len(ops) == 1 and body.id == f"chatcmpl-{ops[0]}"
    used = usage_of(ops)
    # <s>user\nhi</s>\n<s>assistant\n: three special tokens and 18 bytes
    assert used["prefill_tokens"] == body.usage.prompt_tokens == 3 + 18
    assert used["sampled_tokens"] == body.usage.completion_tokens
    assert body.usage.total_tokens == body.usage.prompt_tokens + body.usage.completion_tokens


def test_every_name_of_a_checkpoint_serves_it_through_one_sampler(alice, world) -> None:
    for name in (world["path"], world["arn"], world["path"]):
        r = v1(alice, "completions", {"model": name, "prompt": "ab", "max_tokens": 3, "seed": 1})
        assert r.status_code == 200, r.content
        assert Completion.model_validate(r.json()).choices[0].finish_reason in ("stop", "length")
    samplers = SamplingSession.objects.filter(model_path=world["path"])
    assert samplers.count() == 1  # made on first use, then reused
    assert v1(alice, "completions", {"model": world["session"], "prompt": "ab"}).status_code == 200
    assert SamplingSession.objects.count() == 1  # the session's newest sampler is that one
    r = v1(alice, "completions", {"model": samplers[0].id, "prompt": [97, 98], "logprobs": 2})
    lp = r.json()["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(lp["top_logprobs"]) == len(lp["token_logprobs"])
    assert all(1 <= len(top) <= 2 for top in lp["top_logprobs"])


def test_stop_sequences_and_streaming_in_process(alice, world) -> None:
    r = v1(
        alice,
        "chat/completions",
        {
            "model": world["model"],
            "messages": HI,
            "max_tokens": 8,
            "stream": True,
            "stream_options": {"include_usage": True},
            "seed": 5,
        },
    )
    assert r.status_code == 200 and r["Content-Type"] == "text/event-stream"
    raw = b"".join(r.streaming_content).decode()
    assert raw.startswith("data: {") and raw.endswith("data: [DONE]\n\n")


def test_models_lists_the_tenants_names_only(alice, charlie, world) -> None:
    v1(alice, "completions", {"model": world["path"], "prompt": "x"})  # opens a sampler
    names = {m["id"]: m for m in v1(alice, "models").json()["data"]}
    for key in ("session", "model", "path", "arn"):
        assert world[key] in names, key
    sampler = SamplingSession.objects.get()
    assert names[sampler.id]["kind"] == "sampler" and names[sampler.id]["root"] == TINY
    assert all(m["owned_by"] == alice.tenant.account_id for m in names.values())
    assert v1(alice, f"models/{world['model']}").json()["id"] == world["model"]
    theirs = v1(charlie, "models")
    assert theirs.status_code == 200 and theirs.json() == {"object": "list", "data": []}


def probes(w: dict) -> dict[str, list[tuple[str, dict | None]]]:
    """route → (path, body) naming alice's things."""
    names = [w["session"], w["model"], w["path"], w["arn"], w["sampler"]]
    return {
        "models": [],  # a list: checked for leaks above
        "models/<path:model>": [(f"models/{n}", None) for n in names],
        "chat/completions": [("chat/completions", {"model": n, "messages": HI}) for n in names],
        "completions": [("completions", {"model": n, "prompt": "hi"}) for n in names],
    }


def test_charlie_gets_404_for_every_name_of_alices(alice, charlie, world) -> None:
    v1(alice, "completions", {"model": world["path"], "prompt": "x"})
    world["sampler"] = SamplingSession.objects.get().id
    routes = {str(p.pattern) for p in urlpatterns if isinstance(p, URLPattern)}
    assert routes == set(probes(world)), "add a cross-tenant probe for each route"
    before = Operation.objects.count(), SamplingSession.objects.count()
    for route, calls in probes(world).items():
        for path, body in calls:
            err = error_of(v1(charlie, path, body), 404, "model", "model_not_found")
            assert err["type"] == "invalid_request_error", route
            # the same answer as for a name that never existed
            assert err["message"].endswith("does not exist or you do not have access to it.")
    assert (Operation.objects.count(), SamplingSession.objects.count()) == before


def test_keys_and_unknown_models(alice, world) -> None:
    err = error_of(v1(alice, "models", client=APIClient()), 401, code="missing_api_key")
    assert err["type"] == "invalid_request_error"
    error_of(v1(alice, "models", client=bearer("tml-nope")), 401, code="invalid_api_key")
    body = {"model": "sampler-doesnotexist", "messages": HI}
    error_of(v1(alice, "chat/completions", body), 404, "model", "model_not_found")
    for name in ("gpt-4o", "tinker://model-x/sampler_weights/y", "sess-nothing"):
        error_of(v1(alice, "completions", {"model": name, "prompt": "x"}), 404, "model")


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": HI}, "model"),
        ({"model": "m"}, "messages"),
        ({"model": "m", "messages": []}, "messages"),
        ({"model": "m", "messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
        ({"model": "m", "messages": HI, "temperature": 3}, "temperature"),
        ({"model": "m", "messages": HI, "n": 0}, "n"),
        ({"model": "m", "messages": HI, "top_logprobs": 2}, "top_logprobs"),
        ({"model": "m", "messages": HI, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"model": "m", "messages": HI, "stop": [""]}, "stop"),
        (
            {"model": "m", "messages": HI, "stream_options": {"include_usage": True}},
            "stream_options",
        ),
        ({"model": "m", "messages": HI, "frequency_penalty": 2.5}, "frequency_penalty"),
        ({"model": "m", "messages": HI, "tools": [{"type": "function"}]}, "tools"),
        ({"model": "m", "messages": HI, "bogus": 1}, "bogus"),
    ],
)
def test_bad_chat_requests_name_the_param(alice, body, param) -> None:
    err = error_of(v1(alice, "chat/completions", body), 400, param)
    assert err["type"] == "invalid_request_error" and param in err["message"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m", "prompt": []}, "prompt"),
        ({"model": "m", "prompt": "x", "echo": True}, "echo"),
        ({"model": "m", "prompt": "x", "logprobs": 30}, "logprobs"),
        ({"model": "m", "prompt": ["a"] * 3, "n": 50}, "n"),
    ],
)
def test_bad_completion_requests_name_the_param(alice, body, param) -> None:
    error_of(v1(alice, "completions", body), 400, param)


def test_several_prompts_are_one_operation_each_indexed_prompt_by_sample(alice, world) -> None:
    body = {"model": world["model"], "prompt": ["ab", "cd"], "n": 2, "max_tokens": 3, "seed": 2}
    r = v1(alice, "completions", body)
    assert r.status_code == 200, r.content
    parsed = Completion.model_validate(r.json())
    assert [c.index for c in parsed.choices] == [0, 1, 2, 3]
    ops = list(Operation.objects.filter(kind="sample").order_by("created_at"))
    assert [op.payload["prompt"]["chunks"][0]["tokens"] for op in ops] == [[97, 98], [99, 100]]
    used = usage_of([op.id for op in ops])
    assert (used["prefill_tokens"], used["sampled_tokens"]) == (
        parsed.usage.prompt_tokens,
        parsed.usage.completion_tokens,
    )
    assert parsed.usage.prompt_tokens == 4


def test_a_developer_message_is_a_system_message(alice, world) -> None:
    messages = [{"role": "developer", "content": "be brief"}, *HI]
    r = v1(
        alice, "chat/completions", {"model": world["model"], "messages": messages, "max_tokens": 1}
    )
    assert r.status_code == 200, r.content
    prompt = Operation.objects.get(kind="sample").payload["prompt"]["chunks"][0]["tokens"]
    assert bytes(prompt[1:8]) == b"system\n"


def test_requests_that_cannot_fit_the_context_name_the_param(alice, world) -> None:
    body = {"model": world["model"], "prompt": "x", "max_tokens": 5000}
    err = error_of(v1(alice, "completions", body), 400, "max_tokens")
    assert "maximum context length is 1024 tokens" in err["message"]
    body = {"model": world["model"], "prompt": "x" * 1100}
    error_of(v1(alice, "completions", body), 400, "prompt")
    body = {"model": world["model"], "prompt": [999]}
    error_of(v1(alice, "completions", body), 400, "prompt")
    long_chat = [{"role": "user", "content": "x" * 1100}]
    error_of(
        v1(alice, "chat/completions", {"model": world["model"], "messages": long_chat}),
        400,
        "messages",
    )
    assert not Operation.objects.filter(kind="sample").exists()


def test_an_inline_deny_of_sample_is_a_403(alice, bob, world) -> None:
    deny = {
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "NoSampling", "Effect": "Deny", "Action": "sessions:Sample", "Resource": "*"}
        ],
    }
    r = alice.client.put(
        "/api/v1/iam/users/bob@example.com/policies/no-sampling", {"document": deny}, format="json"
    )
    assert r.status_code == 200, r.content
    err = error_of(v1(bob, "chat/completions", {"model": world["model"], "messages": HI}), 403)
    assert err["type"] == "permission_error" and "sessions:Sample" in err["message"]
    assert (
        v1(alice, "chat/completions", {"model": world["model"], "messages": HI}).status_code == 200
    )


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
    err = error_of(v1(alice, "completions", {"model": world["model"], "prompt": "x"}), 402)
    assert (err["type"], err["code"]) == ("insufficient_quota", "budget_exhausted")


def test_the_request_rate_is_a_429_with_retry_after(alice, world, monkeypatch) -> None:
    monkeypatch.setattr(ratelimit, "_clock", lambda: 1_800_000_000.0)  # a window's first second
    set_quota(alice, "--requests-per-minute", "1")
    assert v1(alice, "models").status_code == 200
    r = v1(alice, "completions", {"model": world["model"], "prompt": "x"})
    err = error_of(r, 429, code="throttled")
    assert err["type"] == "requests" and r["Retry-After"] == "60"


def test_a_retry_with_its_idempotency_key_runs_and_meters_once(alice, charlie, world) -> None:
    body = {"model": world["model"], "prompt": ["ab", "cd"], "max_tokens": 3, "seed": 4}
    key = {"HTTP_IDEMPOTENCY_KEY": "retry-7f3a"}
    first = alice.client.post("/v1/completions", body, format="json", **key)
    assert first.status_code == 200, first.content
    again = alice.client.post("/v1/completions", body, format="json", **key)
    assert again.status_code == 200, again.content
    assert again.json() == first.json()  # the same operations' answer: same id, same text
    ops = list(Operation.objects.filter(kind="sample").values_list("id", flat=True))
    assert len(ops) == 2  # one per prompt, once
    parsed = Completion.model_validate(first.json())
    assert usage_of(ops)["prefill_tokens"] == parsed.usage.prompt_tokens == 4
    # the key with another request, or another number of prompts: 409, nothing runs
    other = alice.client.post(
        "/v1/completions", {**body, "prompt": ["ab", "xy"]}, format="json", **key
    )
    err = error_of(other, 409, "Idempotency-Key")
    assert err["message"] == "Idempotency-Key 'retry-7f3a' was already used by a different request"
    fewer = alice.client.post("/v1/completions", {**body, "prompt": ["ab"]}, format="json", **key)
    error_of(fewer, 409, "Idempotency-Key")
    chat = {"model": world["model"], "messages": HI, "max_tokens": 2}
    r = alice.client.post("/v1/chat/completions", chat, format="json", **key)
    error_of(r, 409, "Idempotency-Key")
    assert Operation.objects.filter(kind="sample").count() == 2
    # keys are the tenant's own: charlie's same key is his, and alice's model is not his
    r = charlie.client.post("/v1/completions", body, format="json", **key)
    error_of(r, 404, "model")
    # without a key every request runs; a bad key names the header
    assert alice.client.post("/v1/completions", body, format="json").status_code == 200
    assert Operation.objects.filter(kind="sample").count() == 4
    bad = alice.client.post("/v1/completions", body, format="json", HTTP_IDEMPOTENCY_KEY="x" * 256)
    assert "255" in error_of(bad, 400, "Idempotency-Key")["message"]
