"""What a hostile user sent, and the clear 4xx each now gets: bodies nested tens of thousands
deep, integers beyond int64, overflowing floats, empty ids, huge strings, unsupported chunks.
None of it is a 5xx, none of it echoes a huge input, and alice's session trains on afterwards;
charlie (another tenant) gets 404s."""

from __future__ import annotations

import json

import pytest

from controlplane.api.urls import urlpatterns
from controlplane.training_sessions.models import Operation
from tests.support.tiny_worker import TINY
from tests.support.wire import create_model, datum, fwdbwd, open_session, result

pytestmark = pytest.mark.django_db

DEEP = "[" * 50_000 + "]" * 50_000
BIG = 2**63  # one past int64


def raw(person, path: str, text: str, prefix: str = "/api/v1/"):
    return person.client.post(f"{prefix}{path}", text, content_type="application/json")


def refused(r, code: str | None = None, field: str | None = None) -> dict:
    assert 400 <= r.status_code < 500, (r.status_code, r.content[:300])
    body = r.json()
    assert set(body) == {"detail", "code", "field"} and len(r.content) < 2500, r.content[:300]
    if code is not None:
        assert body["code"] == code, body
    if field is not None:
        assert body["field"] == field, body
    return body


@pytest.fixture
def model(alice, runtime):
    return create_model(alice, runtime, open_session(alice))


def test_deep_nesting_is_a_400_on_every_write_route(alice):
    writes = [str(p.pattern) for p in urlpatterns if "<" not in str(p.pattern)]
    unread = {"client/config", "client/dynamic_config", "telemetry", "auth/logout"}
    for path in writes:
        r = raw(alice, path, DEEP)
        if r.status_code == 405 or path in unread:
            assert r.status_code in (200, 405), (path, r.status_code)
            continue  # a read-only route, or one that does not read its body
        assert r.status_code == 400, (path, r.status_code, r.content[:200])
        assert "nested more than 200 levels" in r.json()["detail"], path
    for path in ("chat/completions", "completions"):
        r = raw(alice, path, DEEP, prefix="/v1/")
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    "literal", ["1e999", "-1e999", "1" + "0" * 400 + ".0", "NaN", "Infinity", str(BIG)]
)
def test_numbers_out_of_bounds_are_refused_anywhere_in_a_body(alice, literal):
    body = '{"tags": [], "sdk_version": "x", "user_metadata": {"a": [1, {"b": LITERAL}]}}'
    body = body.replace("LITERAL", literal)
    detail = refused(raw(alice, "create_session", body), "parse_error")["detail"]
    assert "0" * 50 not in detail  # the number is not echoed


def test_integers_beyond_their_domain(alice, model):
    sid = open_session(alice)
    for seq in (BIG, 2**31, 0, -1):
        refused(alice.post("forward_backward", fwdbwd(model, seq, [datum([1])])), field="seq_id")
    for seq in (BIG, 2**31, -1):
        r = alice.post("create_model", {"session_id": sid, "model_seq_id": seq, "base_model": TINY})
        refused(r, field="model_seq_id")
        r = alice.post(
            "create_sampling_session",
            {"session_id": sid, "sampling_session_seq_id": seq, "base_model": TINY},
        )
        refused(r, field="sampling_session_seq_id")
    # nothing took a seq_id: the model runs its next one at once
    assert not Operation.objects.filter(model_id=model, seq_id__gt=0).exists()


def test_floats_must_be_finite_and_in_their_domain(alice, model, runtime):
    sid = open_session(alice)
    for seq, (params, field) in enumerate(
        (
            ('{"learning_rate": 1e308}', "adam_params.learning_rate"),
            ('{"beta1": 1.0}', "adam_params.beta1"),
            ('{"eps": -1}', "adam_params.eps"),
            ('{"learning_rate": 1e999}', "parse_error"),  # did not parse: takes no seq_id
        ),
        start=1,
    ):  # each refusal that parsed takes its seq_id (1 to 3)
        text = json.dumps({"model_id": model, "seq_id": seq})[:-1] + f', "adam_params": {params}}}'
        body = refused(raw(alice, "optim_step", text))
        assert field in (body["code"], body["field"]), body
    weights = fwdbwd(model, 4, [datum([1, 2], weights=[1.0, 2.0])])
    text = json.dumps(weights).replace("2.0", "1e999")
    refused(raw(alice, "forward_backward", text), "parse_error")
    lora = {"session_id": sid, "model_seq_id": 1, "base_model": TINY}
    refused(alice.post("create_model", {**lora, "lora_config": {"rank": 4, "alpha": -1}}))
    text = json.dumps({**lora, "lora_config": {"rank": 4}})[:-2] + ', "alpha": 1e999}}'
    refused(raw(alice, "create_model", text), "parse_error")
    fb = alice.post("forward_backward", fwdbwd(model, 4, [datum([1, 2])])).json()
    assert "metrics" in result(alice, runtime, fb)  # the model still trains


def test_ids_must_not_be_empty_and_strings_are_bounded(alice, charlie, model):
    sid = open_session(alice)
    refused(alice.post("forward_backward", fwdbwd("", 1, [datum([1])])), field="model_id")
    refused(alice.post("get_info", {"model_id": ""}), field="model_id")
    refused(alice.post("session_heartbeat", {"session_id": ""}), field="session_id")
    r = alice.post("create_model", {"session_id": "", "model_seq_id": 0, "base_model": TINY})
    refused(r, field="session_id")
    refused(alice.post("retrieve_future", {"request_id": ""}), field="request_id")
    refused(alice.post("iam/roles", {"name": ""}), field="name")
    refused(alice.post("iam/users", {"email": "", "role": "member"}), field="email")
    huge = "x" * 10_000_000
    for path, body, field in (
        ("retrieve_future", {"request_id": huge}, "request_id"),
        ("create_session", {"tags": [huge], "sdk_version": "x"}, "tags[0]"),
        ("get_info", {"model_id": huge}, "model_id"),
        ("iam/roles", {"name": huge}, "name"),
    ):
        refused(alice.post(path, body), field=field)
    # a long id in a path is a 404 that does not echo it whole
    body = refused(alice.get(f"sessions/{'y' * 3000}"), "not_found")
    assert len(body["detail"]) <= 1000
    refused(alice.post("create_session", {"tags": ["t"] * 65, "sdk_version": "x"}), field="tags")
    r = alice.post("create_session", {"tags": [], "sdk_version": "x", "user_metadata": {"a": huge}})
    refused(r, field="user_metadata")
    assert charlie.post("get_info", {"model_id": model}).status_code == 404
    assert charlie.post("session_heartbeat", {"session_id": sid}).status_code == 404


def test_tokens_seeds_and_chunks_are_checked_before_anything_runs(alice, model, runtime):
    refused(alice.post("forward_backward", fwdbwd(model, 1, [datum([BIG])])), "parse_error")
    refused(alice.post("forward_backward", fwdbwd(model, 1, [datum([2**31])])))
    refused(alice.post("forward_backward", fwdbwd(model, 2, [datum([1], targets=[1.5])])))
    refused(
        alice.post(
            "forward_backward",
            {
                "model_id": model,
                "seq_id": 3,
                "forward_backward_input": {"data": [], "loss_fn": "cross_entropy"},
            },
        ),
        field="forward_backward_input.data",
    )
    sid = open_session(alice)
    lora = {"session_id": sid, "model_seq_id": 1, "base_model": TINY}
    refused(alice.post("create_model", {**lora, "lora_config": {"rank": 4, "seed": 10**30}}))
    saved = alice.post(
        "save_weights_for_sampler", {"model_id": model, "seq_id": 4, "sampling_session_seq_id": 0}
    ).json()
    sampler = result(alice, runtime, saved)["sampling_session_id"]
    sample = {
        "sampling_session_id": sampler,
        "seq_id": 1,
        "num_samples": 1,
        "prompt": {"chunks": [{"tokens": [5, 6]}]},
        "sampling_params": {"max_tokens": 2},
    }
    for seed in (2**70, -(2**70)):
        r = alice.post("asample", {**sample, "sampling_params": {"max_tokens": 2, "seed": seed}})
        refused(r)
    image = {"type": "image", "data": "aGk=", "format": "png", "expected_tokens": 4}
    body = refused(alice.post("asample", {**sample, "prompt": {"chunks": [image]}}))
    assert "token chunks" in body["detail"]
    refused(
        alice.post("asample", {**sample, "sampling_params": {"max_tokens": 2, "temperature": -1}})
    )
    ok = alice.post("asample", sample).json()
    assert len(result(alice, runtime, ok)["sequences"]) == 1


def test_signing_up_with_a_taken_email_is_throttled_per_address(client, alice, settings):
    settings.SIGNUP_ADDRESS_LIMIT = 4  # four sign-ups per address and window, taken or not
    body = {"email": "alice@example.com", "password": "a long pass phrase", "tenant_name": "x"}
    for _ in range(4):
        r = client.post("/api/v1/auth/signup", body, content_type="application/json")
        assert r.status_code == 409
    r = client.post("/api/v1/auth/signup", body, content_type="application/json")
    assert r.status_code == 429 and int(r["Retry-After"]) > 0
    # alice herself can still log in: the probes count against the address, not her email
    r = client.post(
        "/api/v1/auth/login",
        {"email": "alice@example.com", "password": "wrong"},
        content_type="application/json",
        REMOTE_ADDR="10.9.9.9",
    )
    assert r.status_code == 401


def test_what_the_fuzzer_found(alice, charlie, model, runtime):
    """NUL, which PostgreSQL cannot store, anywhere in a body, path, query or protobuf string;
    ids and names with control characters (no ARN can hold them); a save with neither a path
    nor a seq_id."""
    sid = open_session(alice)
    r = alice.post("create_model", {"session_id": sid, "model_seq_id": 0, "base_model": "a\x00b"})
    assert "NUL" in refused(r, "parse_error", "base_model")["detail"]
    refused(
        alice.post(
            "create_session", {"tags": [], "sdk_version": "x", "user_metadata": {"k\x00": 1}}
        )
    )
    refused(alice.get("sessions/a%00b"), "invalid_request")
    refused(alice.get("sessions", {"limit": "\x00"}), "invalid_request")
    refused(alice.post("get_info", {"model_id": "model-\x1c"}), field="model_id")
    refused(alice.post("iam/roles", {"name": "role\x1b"}), "invalid_request")
    refused(alice.get("iam/users/%09x/policies/p"), "invalid_request")
    refused(alice.client.put("/api/v1/iam/roles/a%1Cb/trust-policy", {}, format="json"))
    saved = alice.post("save_weights", {"model_id": model})  # no path, no seq_id
    assert saved.status_code == 200, saved.content
    assert result(alice, runtime, saved.json())["path"].startswith(
        f"tinker://{model}/weights/state-"
    )
    assert charlie.post("save_weights", {"model_id": model}).status_code == 404


def test_token_ids_past_the_vocabulary_are_refused_on_arrival(alice, charlie, model, runtime):
    from controlplane.fleet.models import BaseModel

    vocab = BaseModel.objects.get(name=TINY).vocab_size
    assert vocab == runtime.host.vocab_size
    body = refused(alice.post("forward_backward", fwdbwd(model, 1, [datum([1, vocab])])))
    assert f"[0, {vocab})" in body["detail"] and body["field"] == "forward_backward_input.data"
    refused(
        alice.post(
            "forward",
            {
                "model_id": model,
                "seq_id": 2,
                "forward_input": fwdbwd(model, 2, [datum([1], targets=[vocab + 5])])[
                    "forward_backward_input"
                ],
            },
        )
    )
    ok = alice.post("forward_backward", fwdbwd(model, 3, [datum([1, vocab - 1], targets=[0, 1])]))
    assert "metrics" in result(alice, runtime, ok.json())  # the refusals took seq_ids 1 and 2
    saved = alice.post(
        "save_weights_for_sampler", {"model_id": model, "seq_id": 4, "sampling_session_seq_id": 0}
    ).json()
    sampler = result(alice, runtime, saved)["sampling_session_id"]
    sample = {
        "sampling_session_id": sampler,
        "num_samples": 1,
        "prompt": {"chunks": [{"tokens": [5, vocab]}]},
        "sampling_params": {"max_tokens": 2},
    }
    assert "vocabulary" in refused(alice.post("asample", sample))["detail"]
    stop = {**sample, "prompt": {"chunks": [{"tokens": [5]}]}}
    stop["sampling_params"] = {"max_tokens": 2, "stop": [vocab + 1]}
    refused(alice.post("asample", stop))
    assert (
        charlie.post("asample", {**sample, "prompt": {"chunks": [{"tokens": [5]}]}}).status_code
        == 404
    )
