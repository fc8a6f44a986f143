"""Budgets and keys on the SageMaker runtime: operations made with an access key pair are
metered under its id, and a hard budget on that key refuses its next training, sampling and
passthrough requests with the model's ValidationException (its refusal of a request) naming the
budget, while the Tinker face's API key goes on."""

from __future__ import annotations

import json

import pytest

from controlplane.metering.models import UsageRecord
from controlplane.training_sessions.models import TrainingModel
from tests.support.wire import datum, fwdbwd

from .sessions import SHORT, prompt
from .test_runtime_api import execute, fb_config, get

pytestmark = pytest.mark.django_db


def test_an_access_keys_budget_refuses_its_requests_on_the_runtime(alice, ts, runtime) -> None:
    sm = alice.sm
    done = execute(sm, ts, 1, fb_config(), token="t-1")
    get(sm, ts, done, runtime)
    keys = set(UsageRecord.objects.filter(tenant=alice.tenant).values_list("api_key", flat=True))
    assert keys == {alice.key_id}
    r = alice.api.post(
        "billing/budgets",
        {"name": "boto", "scope": "api_key", "scope_value": alice.key_id, "unit": "tokens",
         "period": "month", "amount": 10},
    )  # fmt: skip
    assert r.status_code == 201, r.content

    with pytest.raises(sm.exceptions.ValidationException) as refused:
        execute(sm, ts, 2, fb_config(), token="t-2")
    message = refused.value.response["Error"]["Message"]
    assert "budget 'boto'" in message and f"access key {alice.key_id}" in message
    sample = {"sample": {"prompt": prompt([1, 2, 3]), "numSamples": 1,
                         "samplingParams": SHORT}}  # fmt: skip
    with pytest.raises(sm.exceptions.ValidationException) as refused:
        sm.execute_sampling_operation(trainingSessionName=ts, operationConfig=sample)
    assert "budget 'boto'" in refused.value.response["Error"]["Message"]
    with pytest.raises(sm.exceptions.ValidationException) as refused:
        sm.sample_training_session(
            trainingSessionName=ts, body=json.dumps({"prompt": [1, 2], "max_tokens": 2})
        )
    assert "budget 'boto'" in refused.value.response["Error"]["Message"]

    model = TrainingModel.objects.get(session__name=ts)  # the Tinker face's key goes on
    ok = alice.api.post("forward_backward", fwdbwd(model.id, 3, [datum([1, 2, 3])]))
    assert ok.status_code == 200, ok.content
