"""The session page's "Try it" box, with the tiny model's worker in process: every sampling
control of /v1 on the form, answers (with logprobs, in a JSON schema) sampled as /v1 samples them,
the API's refusals next to their fields, and charlie reaching nothing of alice's."""

from __future__ import annotations

import json

import jsonschema
import pytest

from controlplane.audit.models import AuditEvent
from controlplane.completions import services
from controlplane.metering.models import UsageRecord
from controlplane.training_sessions.models import Operation
from tests.support.callers import Person, api_client
from tests.support.wire import create_model, open_session

pytestmark = pytest.mark.django_db


FIELDS = [
    "model", "system", "messages", "max_tokens", "n", "seed", "temperature", "top_p", "top_k",
    "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty", "logit_bias",
    "response_format", "json_schema", "logprobs", "top_logprobs", "logprobs_mode",
]  # fmt: skip


@pytest.fixture
def live(alice, runtime, monkeypatch) -> tuple[str, str]:
    """alice's session with a ready model on the tiny worker; the worker runs what the box
    submits while the view waits."""

    def wait(op, deadline):
        runtime.drain()
        op.refresh_from_db()
        return op

    monkeypatch.setattr(services, "operation_wait", wait)
    caller = Person("alice", api_client(alice.api_key), alice.tenant, alice.role_arn, alice.api_key)
    session = open_session(caller)
    return session, create_model(caller, runtime, session)


def ask(person, session: str, **change):
    data = {
        "model": session, "system": "", "messages": "hi", "max_tokens": 8, "n": 1, "seed": 3,
        "temperature": 1.0, "response_format": "text", "logprobs_mode": "sampled",
    } | change  # fmt: skip
    return person.post(f"/sessions/{session}/try", data)


def test_the_session_page_has_the_box_with_every_control(alice, live) -> None:
    session, model = live
    html = alice.get(f"/sessions/{session}").content.decode()
    assert f'action="/sessions/{session}/try#try-head"' in html
    for name in FIELDS:
        assert f'name="{name}"' in html, name
    assert f'<option value="{model}">' in html and "web/try.js" in html
    assert 'name="min_p" step="any" min="0" max="1"' in html  # the browser knows the bounds


def test_an_answer_with_processors_and_logprobs(alice, live) -> None:
    session, model = live
    r = ask(
        alice, session, model=model, n=2, min_p="0.05", repetition_penalty="1.3",
        presence_penalty="0.5", frequency_penalty="-0.5", logit_bias='{"97": 100, "98": 100}',
        logprobs="on", top_logprobs="2", logprobs_mode="model",
    )  # fmt: skip
    assert r.status_code == 200, r.content.decode()[-2000:]
    html = r.content.decode()
    assert html.count('class="card choice"') == 2 and 'class="compact logprobs"' in html
    op = Operation.objects.get(kind="sample")
    params = op.payload["sampling_params"]
    assert params["min_p"] == 0.05 and params["logit_bias"] == {"97": 100.0, "98": 100.0}
    assert params["logprobs_of"] == "model" and op.payload["topk_logprobs"] == 2
    for seq in op.result["sequences"]:
        assert set(seq["tokens"]) <= {97, 98, 258}
    assert UsageRecord.objects.filter(operation_id=op.id, meter="sampled_tokens").exists()
    sample = AuditEvent.objects.filter(tenant=alice.tenant, action="sessions:Sample")
    assert sample.filter(allowed=True).exists()  # authorized and audited as /v1 does


def test_a_json_schema_answer_satisfies_it(alice, live) -> None:
    session, _ = live
    schema = {
        "type": "object",
        "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["x"],
        "additionalProperties": False,
    }
    r = ask(alice, session, response_format="json_schema", json_schema=json.dumps(schema),
            max_tokens=40, n=3)  # fmt: skip
    assert r.status_code == 200
    for seq in Operation.objects.get(kind="sample").result["sequences"]:
        jsonschema.validate(json.loads(bytes(seq["tokens"]).decode()), schema)


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"min_p": "1.5"}, "min_p", "less than or equal to 1"),
        ({"repetition_penalty": "0"}, "repetition_penalty", "greater than 0"),
        ({"presence_penalty": "-3"}, "presence_penalty", "greater than or equal to -2"),
        ({"logit_bias": "[1]"}, "logit_bias", "must be a JSON object"),
        ({"logit_bias": '{"x": 1}'}, "logit_bias", "decimal"),
        ({"logit_bias": '{"9999": 1}'}, "logit_bias", "vocabulary"),
        (
            {"response_format": "json_schema", "json_schema": '{"type": "objekt"}'},
            "response_format",
            "objekt",
        ),
        ({"top_p": "0"}, "top_p", "greater than 0"),
        ({"n": "9"}, "n", "at most 8"),
    ],
)
def test_the_apis_refusals_are_next_to_their_field(alice, live, change, field, words) -> None:
    session, _ = live
    r = ask(alice, session, **change)
    assert r.status_code == 400
    html = r.content.decode()
    errors = html.split(f'id="try_{field}"')[0].rsplit('<div class="row', 1)[-1]
    assert words in errors, errors[-600:]
    assert not Operation.objects.filter(kind="sample").exists()


def test_charlie_reaches_nothing_of_alices(alice, charlie, live) -> None:
    session, model = live
    assert charlie.get(f"/sessions/{session}/try").status_code == 404
    assert ask(charlie, session, model=model).status_code == 404
    own = ask(charlie, "sess-nothing")
    assert own.status_code == 404
    assert not Operation.objects.filter(kind="sample").exists()
