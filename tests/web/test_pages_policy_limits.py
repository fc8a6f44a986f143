"""The dashboard's policy editor refuses a policy past the limits on wildcards and condition
values, saying which element and which limit, as the API does; nothing is saved."""

from __future__ import annotations

import html
import json

from controlplane.iam.models import Role
from controlplane.iam.policy_limits import MAX_CONDITION_VALUES, MAX_PATTERN_WILDCARDS


def test_the_editor_refuses_a_policy_past_the_limits(alice) -> None:
    url = "/iam/roles/LoopwrightSessionRole/policies/new"
    statement = {
        "Effect": "Allow",
        "Action": "sessions:*",
        "Resource": "*",
        "Condition": {"StringLike": {"loopwright:UserAgent": "*a" * MAX_PATTERN_WILDCARDS + "*"}},
    }
    document = {"Version": "2012-10-17", "Statement": [statement]}
    r = alice.post(url, {"policy_name": "agents", "document": json.dumps(document, indent=2)})
    body = html.unescape(r.content.decode())
    assert r.status_code == 400
    assert "Statement[0].Condition.StringLike" in body
    assert f"the limit is {MAX_PATTERN_WILDCARDS}" in body
    values = [f"agent-{n}" for n in range(MAX_CONDITION_VALUES + 1)]
    statement["Condition"] = {"StringEquals": {"loopwright:UserAgent": values}}
    r = alice.post(url, {"policy_name": "agents", "document": json.dumps(document)})
    assert r.status_code == 400
    assert f"the limit is {MAX_CONDITION_VALUES} per key" in html.unescape(r.content.decode())
    role = Role.objects.get(tenant=alice.tenant, name="LoopwrightSessionRole")
    assert not role.policies.filter(name="agents").exists()
