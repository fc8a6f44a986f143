"""The session page's "Try it" box: a chat message sampled from the session's newest weights (or
one of its models) with every sampling control ``/v1/chat/completions`` takes.

The form only parses (numbers, JSON); the request is then validated by the OpenAI face's own
schema and run by its own service, as the dashboard user (authorized, audited and metered like
``/v1``): a value the API refuses is refused here with the API's words, next to its field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django import forms
from django.core.exceptions import ValidationError as FormError
from django.http import HttpRequest
from pydantic import ValidationError

from controlplane.completions.rendering import token_text
from controlplane.edge.callers import allow
from controlplane.edge.errors import validation_param
from controlplane.errors import DomainError
from controlplane.openai_api import services
from controlplane.openai_api.schemas import ChatCompletionRequest
from controlplane.training_sessions.models import Session, TrainingModel

from .formkit import Form, code_area

MAX_TOKENS = 1024
MAX_CHOICES = 8  # answers shown at once in the box


def _number(low: float | None, high: float | None, step: str = "any") -> forms.NumberInput:
    """A number input with the API's bounds, so that the browser says so before sending."""
    attrs: dict[str, Any] = {"step": step}
    if low is not None:
        attrs["min"] = low
    if high is not None:
        attrs["max"] = high
    return forms.NumberInput(attrs=attrs)


def _json_object(text: str, field: str) -> dict | None:
    if not text.strip():
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise FormError(f"{field} must be a JSON object: {exc}") from None
    if not isinstance(value, dict):
        raise FormError(f"{field} must be a JSON object")
    return value


class TryForm(Form):
    id_prefix = "try"

    model = forms.ChoiceField(help_text="The session's newest weights, or one of its models.")
    system = forms.CharField(required=False, max_length=8000, widget=forms.Textarea({"rows": 2}))
    messages = forms.CharField(label="Message", max_length=8000, widget=forms.Textarea({"rows": 3}))
    max_tokens = forms.IntegerField(initial=64, widget=_number(1, MAX_TOKENS, "1"))
    n = forms.IntegerField(label="Answers (n)", initial=1, widget=_number(1, MAX_CHOICES, "1"))
    seed = forms.IntegerField(required=False, widget=_number(None, None, "1"))
    temperature = forms.FloatField(initial=1.0, widget=_number(0, 2))
    top_p = forms.FloatField(required=False, widget=_number(0, 1), help_text="(0, 1]")
    top_k = forms.IntegerField(required=False, widget=_number(-1, None, "1"), help_text="-1: off")
    min_p = forms.FloatField(required=False, widget=_number(0, 1), help_text="0 to 1")
    repetition_penalty = forms.FloatField(
        required=False, widget=_number(0, None), help_text="above 0; 1 is off"
    )
    presence_penalty = forms.FloatField(required=False, widget=_number(-2, 2), help_text="−2 to 2")
    frequency_penalty = forms.FloatField(required=False, widget=_number(-2, 2), help_text="−2 to 2")
    logit_bias = forms.CharField(
        required=False,
        widget=code_area(2),
        help_text='JSON: token id → −100 to 100, e.g. {"198": -100}',
    )
    response_format = forms.ChoiceField(
        choices=[("text", "text"), ("json_object", "a JSON object"), ("json_schema", "JSON schema")]
    )
    json_schema = forms.CharField(
        label="Schema", required=False, widget=code_area(6), help_text="JSON Schema (strict)"
    )
    logprobs = forms.BooleanField(required=False)
    top_logprobs = forms.IntegerField(required=False, widget=_number(0, 20, "1"))
    logprobs_mode = forms.ChoiceField(
        label="Logprobs of",
        choices=[("sampled", "the law drawn from"), ("model", "the model's own")],
    )

    def __init__(self, *args, names: list[tuple[str, str]], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["model"].choices = names

    def clean_logit_bias(self) -> dict | None:
        return _json_object(self.cleaned_data["logit_bias"], "logit_bias")

    def clean_json_schema(self) -> dict | None:
        return _json_object(self.cleaned_data["json_schema"], "the schema")


def model_names(session: Session) -> list[tuple[str, str]]:
    """What the box may sample: the session (its newest sampler), then each ready model."""
    ready = session.models.filter(state=TrainingModel.State.READY).order_by("created_at")
    return [(session.id, f"{session.id} (newest weights)")] + [(m.id, m.id) for m in ready]


def request_body(data: dict) -> dict:
    """The ``/v1/chat/completions`` body of the form's data (empty fields left out)."""
    messages = [{"role": "user", "content": data["messages"]}]
    if data.get("system"):
        messages.insert(0, {"role": "system", "content": data["system"]})
    body: dict[str, Any] = {"model": data["model"], "messages": messages}
    for name in (
        "max_tokens", "n", "seed", "temperature", "top_p", "top_k", "min_p",
        "repetition_penalty", "presence_penalty", "frequency_penalty", "logit_bias",
    ):  # fmt: skip
        if data.get(name) is not None:
            body[name] = data[name]
    if data["response_format"] == "json_object":
        body["response_format"] = {"type": "json_object"}
    elif data["response_format"] == "json_schema":
        schema = {"name": "answer", "schema": data.get("json_schema") or {}, "strict": True}
        body["response_format"] = {"type": "json_schema", "json_schema": schema}
    if data.get("logprobs"):
        body |= {"logprobs": True, "top_logprobs": data.get("top_logprobs") or 0}
        body["logprobs_mode"] = data["logprobs_mode"]
    return body


@dataclass(frozen=True)
class Answer:
    choices: list[dict]
    prompt_tokens: int
    completion_tokens: int


def run(request: HttpRequest, data: dict) -> Answer:
    """Validate as the API does, then sample as the API does."""
    body = request_body(data)
    try:
        req = ChatCompletionRequest.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = validation_param(first.get("loc", ())) or None
        raise DomainError(
            f"{param}: {first['msg']}" if param else first["msg"], field=param
        ) from None
    if (req.n or 1) > MAX_CHOICES:
        raise DomainError(f"n: at most {MAX_CHOICES} answers in this box", field="n")
    done = services.chat_complete(
        tenant=request.tenant,
        req=req,
        authorize=lambda action, resource: allow(request, action, resource),
    )
    choices = [
        {
            "text": c.text,
            "finish_reason": c.finish_reason,
            "tokens": [
                {
                    "text": token_text(done.tokenizer, p.token_id).text,
                    "logprob": p.logprob,
                    "top": [(token_text(done.tokenizer, t).text, lp) for t, lp in p.top],
                }
                for p in c.pieces
            ]
            if req.wants_logprobs
            else None,
        }
        for c in done.choices
    ]
    return Answer(choices, done.prompt_tokens, done.completion_tokens)
