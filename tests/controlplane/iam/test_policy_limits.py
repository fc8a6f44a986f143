"""A policy past the limits on wildcards and condition values is refused when written through the
API, with a 400 naming the element and the limit; nothing is saved. Charlie sees none of it."""

from __future__ import annotations

from controlplane.iam.models import Role
from controlplane.iam.policy_limits import MAX_CONDITION_VALUE_CHARS, MAX_PATTERN_WILDCARDS
from tests.support.callers import Person

ADVERSARIAL = "*a" * MAX_PATTERN_WILDCARDS + "*b"  # one wildcard past the limit


def _policy(condition: dict) -> dict:
    statement = {"Effect": "Allow", "Action": "sessions:*", "Resource": "*"}
    return {"Version": "2012-10-17", "Statement": [statement | {"Condition": condition}]}


def test_too_many_wildcards_are_refused_naming_the_field(alice: Person, charlie: Person) -> None:
    url = "/api/v1/iam/users/bob@example.com/policies/agents"
    document = _policy({"StringLike": {"loopwright:UserAgent": ADVERSARIAL}})
    r = alice.client.put(url, {"document": document}, format="json")
    assert r.status_code == 400, r.content
    body = r.json()
    assert body["field"] == "document.Statement[0].Condition.StringLike"
    assert f"the limit is {MAX_PATTERN_WILDCARDS}" in body["detail"]
    assert alice.client.get(url).status_code == 404  # nothing saved
    r = charlie.client.put(url, {"document": document}, format="json")
    assert r.status_code == 404


def test_long_condition_values_and_role_policies_are_refused(alice: Person) -> None:
    document = _policy(
        {"StringEquals": {"loopwright:UserAgent": "x" * (MAX_CONDITION_VALUE_CHARS + 1)}}
    )
    url = "/api/v1/iam/roles/LoopwrightSessionRole/policies/long"
    r = alice.client.put(url, {"document": document}, format="json")
    assert r.status_code == 400
    assert f"the limit is {MAX_CONDITION_VALUE_CHARS}" in r.json()["detail"]
    role = Role.objects.get(tenant=alice.tenant, name="LoopwrightSessionRole")
    assert not role.policies.filter(name="long").exists()
    within = _policy({"StringLike": {"loopwright:UserAgent": "*a" * (MAX_PATTERN_WILDCARDS // 2)}})
    assert alice.client.put(url, {"document": within}, format="json").status_code == 200
