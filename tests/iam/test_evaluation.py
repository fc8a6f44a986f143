"""Policy evaluation: decision logic, every condition operator family, variables and trust."""

from __future__ import annotations

from datetime import UTC, datetime
from ipaddress import ip_address
from typing import Any

import pytest

from controlplane.iam.evaluation import AccessRequest, Decision, evaluate, evaluate_trust
from controlplane.iam.policy import PolicyDocument

ACCOUNT = "123456789012"
OTHER = "210987654321"
ALICE = f"arn:loopwright:iam::{ACCOUNT}:user/alice"
SESSION = f"arn:loopwright:sessions::{ACCOUNT}:session/s-1"
MODEL = f"arn:loopwright:sessions::{ACCOUNT}:model/s-1/m-1"
SAMPLER = f"arn:loopwright:sessions::{ACCOUNT}:sampler/smp-1"


def doc(*statements: dict[str, Any], version: str = "2012-10-17") -> PolicyDocument:
    return PolicyDocument.parse({"Version": version, "Statement": list(statements)})


def stmt(effect: str = "Allow", action: Any = "*", resource: Any = "*", **extra: Any) -> dict:
    out = {"Effect": effect, **extra}
    if "NotAction" not in extra:
        out["Action"] = action
    if "NotResource" not in extra:
        out["Resource"] = resource
    return out


def decide(
    *statements: dict[str, Any],
    action: str = "sessions:Sample",
    resource: str = SAMPLER,
    context: dict[str, Any] | None = None,
    principal: str = ALICE,
) -> Decision:
    request = AccessRequest(action, resource, principal, context or {})
    return evaluate([("p", doc(*statements))], request)


def allowed_by(condition: dict[str, Any], context: dict[str, Any]) -> bool:
    return decide(stmt(Condition=condition), context=context).allowed


# -- the decision logic ----------------------------------------------------------------------


def test_explicit_deny_beats_allow_across_policies() -> None:
    guard = doc(stmt("Deny", "sessions:DeleteCheckpoint", Sid="NoDelete"))
    admin = doc(stmt("Allow", "*"))
    request = AccessRequest("sessions:DeleteCheckpoint", f"{SESSION}/c", ALICE)
    decision = evaluate([("admin", admin), ("guard", guard)], request)
    assert decision == Decision(
        allowed=False,
        effect="ExplicitDeny",
        policy="guard",
        statement="NoDelete",
        reason="explicitly denied by statement 'NoDelete' of policy 'guard'",
    )


def test_deny_without_sid_is_labelled_by_index() -> None:
    decision = decide(stmt("Allow"), stmt("Deny", "sessions:Sample"))
    assert (decision.effect, decision.statement) == ("ExplicitDeny", "#1")
    assert decision.reason == "explicitly denied by statement #1 of policy 'p'"


def test_allow_names_the_first_allowing_statement() -> None:
    decision = decide(stmt("Allow", "kms:*"), stmt("Allow", "sessions:*", Sid="Train"), stmt())
    assert (decision.allowed, decision.effect, decision.statement) == (True, "Allow", "Train")
    assert decision.reason == "allowed by statement 'Train' of policy 'p'"


def test_no_allow_is_an_implicit_deny() -> None:
    decision = decide(stmt("Allow", "sessions:Forward"))
    assert decision == Decision(
        False, "ImplicitDeny", None, None, f"no policy allows sessions:Sample on {SAMPLER}"
    )
    assert not evaluate([], AccessRequest("sessions:Sample", SAMPLER)).allowed


@pytest.mark.parametrize(
    ("action", "requested", "expected"),
    [
        ("sessions:Sample", "sessions:Sample", True),
        ("sessions:Sample", "SESSIONS:sample", True),
        ("Sessions:SAMPLE", "sessions:Sample", True),
        ("sessions:*", "sessions:Sample", True),
        ("sessions:Forward*", "sessions:ForwardBackward", True),
        ("sessions:Forward*", "sessions:Sample", False),
        ("sessions:Sampl?", "sessions:Sample", True),
        ("sessions:Sampl?", "sessions:Samples", False),
        ("*:Describe*", "kms:DescribeKey", True),
        ("*", "audit:LookupEvents", True),
        (["kms:Encrypt", "sessions:Sample"], "sessions:Sample", True),
    ],
)
def test_action_matching(action: Any, requested: str, expected: bool) -> None:
    assert decide(stmt(action=action), action=requested).allowed is expected


def test_not_action_matches_every_other_action() -> None:
    statement = stmt(NotAction=["iam:*", "billing:ManageBilling"])
    assert decide(statement, action="sessions:Sample").allowed
    assert not decide(statement, action="iam:CreateRole").allowed
    assert not decide(statement, action="BILLING:managebilling").allowed
    deny = stmt("Deny", NotAction="sessions:Describe*")
    assert decide(stmt(), deny, action="sessions:StopTrainingSession").effect == "ExplicitDeny"
    assert decide(stmt(), deny, action="sessions:DescribeTrainingSession").allowed


@pytest.mark.parametrize(
    ("resource", "requested", "expected"),
    [
        ("*", SAMPLER, True),
        ("*", "*", True),
        (SAMPLER, SAMPLER, True),
        (f"arn:loopwright:sessions::{ACCOUNT}:sampler/*", SAMPLER, True),
        (f"arn:loopwright:sessions::{ACCOUNT}:sampler/SMP-1", SAMPLER, False),
        (f"arn:loopwright:sessions::{OTHER}:sampler/*", SAMPLER, False),
        ("arn:loopwright:sessions::*:*", SAMPLER, True),
        # an ARN pattern never matches the "*" of actions that take no resource
        ("arn:loopwright:*:*:*:*", "*", False),
    ],
)
def test_resource_matching(resource: str, requested: str, expected: bool) -> None:
    assert decide(stmt(resource=resource), resource=requested).allowed is expected


def test_not_resource_matches_every_other_resource() -> None:
    statement = stmt(NotResource=f"arn:loopwright:sessions::{ACCOUNT}:sampler/prod-*")
    assert decide(statement, resource=SAMPLER).allowed
    assert not decide(statement, resource=SAMPLER.replace("smp-1", "prod-7")).allowed
    deny_outside = stmt("Deny", NotResource=f"arn:loopwright:*:*:{ACCOUNT}:*")
    other_account = SAMPLER.replace(ACCOUNT, OTHER)
    assert decide(stmt(), deny_outside, resource=other_account).effect == "ExplicitDeny"
    assert decide(stmt(), deny_outside, resource=SAMPLER).allowed


def test_trust_policy_cannot_decide_a_permission_request() -> None:
    trust = PolicyDocument.parse(
        {
            "Version": "2012-10-17",
            "Statement": {"Effect": "Allow", "Action": "sts:AssumeRole", "Principal": "*"},
        },
        kind="trust",
    )
    with pytest.raises(ValueError, match="trust policy"):
        evaluate([("t", trust)], AccessRequest("sessions:Sample", SAMPLER))


# -- condition operators ---------------------------------------------------------------------

T0 = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)

CONDITIONS: list[tuple[str, Any, Any, bool]] = [
    # (operator, policy value(s), context value or None for a missing key, allowed)
    ("StringEquals", "ml", "ml", True),
    ("StringEquals", "ml", "ML", False),
    ("StringEquals", ["ml", "research"], "research", True),
    ("StringEquals", "ml", None, False),
    ("StringEquals", "ml*", "mlops", False),
    ("StringEquals", 8, "8", True),
    ("StringNotEquals", "ml", "ops", True),
    ("StringNotEquals", "ml", "ml", False),
    ("StringNotEquals", ["ml", "research"], "research", False),  # values NOR
    ("StringNotEquals", ["ml", "research"], "ops", True),
    ("StringNotEquals", "ml", None, True),  # a negated operator holds for a missing key
    ("StringEqualsIgnoreCase", "ML", "ml", True),
    ("StringEqualsIgnoreCase", "ML", "mlops", False),
    ("StringNotEqualsIgnoreCase", "ML", "ml", False),
    ("StringNotEqualsIgnoreCase", "ML", "ops", True),
    ("StringLike", "ml-*", "ml-team", True),
    ("StringLike", "ml-?", "ml-ab", False),
    ("StringLike", "ML-*", "ml-team", False),
    ("StringLike", ["ops", "ml-*"], "ml-", True),
    ("StringNotLike", "ml-*", "ml-team", False),
    ("StringNotLike", ["ops", "ml-*"], "research", True),
    ("StringNotLike", "ml-*", None, True),
    ("StringLikeIfExists", "ml-*", None, True),
    ("StringLikeIfExists", "ml-*", "ops", False),
    ("StringEquals", "true", True, True),  # booleans read as "true"/"false"
    ("NumericEquals", 8, 8, True),
    ("NumericEquals", "8", 8.0, True),
    ("NumericEquals", "0.1", 0.1, True),
    ("NumericNotEquals", [4, 8], 8, False),
    ("NumericNotEquals", [4, 8], 2, True),
    ("NumericLessThan", 8, 7, True),
    ("NumericLessThan", 8, 8, False),
    ("NumericLessThanEquals", 8, 8, True),
    ("NumericGreaterThan", "2.5", 3, True),
    ("NumericGreaterThan", "2.5", "2.5", False),
    ("NumericGreaterThanEquals", -1, "-1", True),
    ("NumericLessThan", 8, "eight", False),
    ("NumericLessThan", 8, None, False),
    ("NumericLessThanIfExists", 8, None, True),
    ("NumericLessThanIfExists", 8, 9, False),
    ("DateEquals", "2025-06-01T12:00:00Z", T0, True),
    ("DateEquals", T0.timestamp(), "2025-06-01T14:00:00+02:00", True),
    ("DateNotEquals", "2025-06-01T12:00:00Z", T0, False),
    ("DateLessThan", "2025-06-02", T0, True),
    ("DateLessThan", "2025-06-01T12:00:00Z", T0, False),
    ("DateLessThanEquals", "2025-06-01T12:00:00Z", T0, True),
    ("DateGreaterThan", "2025-01-01T00:00:00Z", T0, True),
    ("DateGreaterThan", 1748779200, T0, False),  # epoch seconds of T0
    ("DateGreaterThanEquals", "1748779200", int(T0.timestamp()), True),
    ("DateLessThan", "2025-06-02", datetime(2025, 6, 1, 23, 0), True),  # naive means UTC
    ("DateLessThan", "2025-06-02", "not a date", False),
    ("Bool", "true", True, True),
    ("Bool", True, "true", True),
    ("Bool", "false", True, False),
    ("Bool", "true", None, False),
    ("BoolIfExists", "false", None, True),
    ("BinaryEquals", "QmluYXJ5", b"Binary", True),
    ("BinaryEquals", "QmluYXJ5", "QmluYXJ5", True),
    ("BinaryEquals", "QmluYXJ5", b"binary", False),
    ("IpAddress", "203.0.113.0/24", "203.0.113.7", True),
    ("IpAddress", "203.0.113.0/24", "198.51.100.7", False),
    ("IpAddress", "203.0.113.7", "203.0.113.7", True),
    ("IpAddress", ["10.0.0.0/8", "2001:db8::/32"], "2001:db8::1", True),
    ("IpAddress", "2001:db8::/32", "203.0.113.7", False),
    ("IpAddress", "10.0.0.0/8", ip_address("10.1.2.3"), True),
    ("IpAddress", "10.0.0.0/8", "not an address", False),
    ("NotIpAddress", ["10.0.0.0/8", "192.168.0.0/16"], "192.168.1.1", False),
    ("NotIpAddress", ["10.0.0.0/8", "192.168.0.0/16"], "8.8.8.8", True),
    ("ArnEquals", ALICE, ALICE, True),
    ("ArnEquals", f"arn:loopwright:iam::{ACCOUNT}:user/*", ALICE, True),
    ("ArnLike", f"arn:loopwright:iam::{ACCOUNT}:role/*", ALICE, False),
    ("ArnLike", "arn:loopwright:iam::*:user/ali?e", ALICE, True),
    ("ArnNotEquals", ALICE, ALICE, False),
    ("ArnNotLike", f"arn:loopwright:iam::{OTHER}:*", ALICE, True),
    ("ArnNotLike", f"arn:loopwright:iam::{OTHER}:*", None, True),
    ("ArnLikeIfExists", f"arn:loopwright:iam::{OTHER}:*", ALICE, False),
    ("Null", "true", None, True),
    ("Null", "true", "x", False),
    ("Null", "false", "x", True),
    ("Null", False, None, False),
    ("Null", "true", [], True),  # an empty multi-valued key counts as absent
    ("Null", "false", "", True),  # an empty string is a value
]


@pytest.mark.parametrize(("operator", "values", "value", "expected"), CONDITIONS)
def test_condition_operator(operator: str, values: Any, value: Any, expected: bool) -> None:
    context = {} if value is None else {"loopwright:Key": value}
    assert allowed_by({operator: {"loopwright:Key": values}}, context) is expected


def test_condition_keys_match_case_insensitively() -> None:
    condition = {"StringEquals": {"Loopwright:TEAM": "ml"}}
    assert allowed_by(condition, {"loopwright:team": "ml"})
    assert not allowed_by(condition, {"loopwright:team": "ML"})  # values stay case-sensitive


def test_keys_and_operators_combine_with_and() -> None:
    condition = {
        "StringEquals": {"loopwright:Team": "ml", "sessions:BaseModel": "SmolLM2-135M"},
        "NumericLessThanEquals": {"sessions:GpuCount": 8},
    }
    everything = {
        "loopwright:Team": "ml",
        "sessions:BaseModel": "SmolLM2-135M",
        "sessions:GpuCount": 4,
    }
    assert allowed_by(condition, everything)
    assert not allowed_by(condition, everything | {"sessions:GpuCount": 16})
    assert not allowed_by(condition, everything | {"loopwright:Team": "ops"})
    assert not allowed_by(
        condition, {k: v for k, v in everything.items() if k != "sessions:BaseModel"}
    )


SETS: list[tuple[str, Any, Any, bool]] = [
    # (operator, policy values, multi-valued context value or None, allowed)
    ("ForAllValues:StringEquals", ["a", "b"], ["a"], True),
    ("ForAllValues:StringEquals", ["a", "b"], ["a", "b"], True),
    ("ForAllValues:StringEquals", ["a", "b"], ["a", "c"], False),
    ("ForAllValues:StringEquals", ["a", "b"], None, True),  # missing key: true
    ("ForAllValues:StringEquals", ["a", "b"], [], True),  # empty set: true
    ("ForAnyValue:StringEquals", ["a", "b"], ["c", "b"], True),
    ("ForAnyValue:StringEquals", ["a", "b"], ["c", "d"], False),
    ("ForAnyValue:StringEquals", ["a", "b"], None, False),  # missing key: false
    ("ForAnyValue:StringEquals", ["a", "b"], [], False),
    ("ForAnyValue:StringEqualsIfExists", ["a"], None, True),
    ("ForAllValues:StringLike", "team-*", ["team-a", "team-b"], True),
    ("ForAllValues:StringLike", "team-*", ["team-a", "owner"], False),
    ("ForAnyValue:StringNotEquals", ["a", "b"], ["a", "c"], True),  # "c" is neither
    ("ForAnyValue:StringNotEquals", ["a", "b"], ["a", "b"], False),
    ("ForAnyValue:StringNotEquals", ["a"], None, False),
    ("ForAllValues:StringNotEquals", ["a", "b"], ["c", "d"], True),
    ("ForAllValues:StringNotEquals", ["a", "b"], ["c", "a"], False),
    ("ForAllValues:StringNotEquals", ["a"], None, True),
    ("ForAnyValue:NumericGreaterThan", 8, [1, 16], True),
    ("ForAllValues:NumericGreaterThan", 8, [1, 16], False),
    ("ForAnyValue:IpAddress", "10.0.0.0/8", ["192.0.2.1", "10.0.0.1"], True),
    ("ForAllValues:ArnLike", "arn:loopwright:iam::*:role/*", [ALICE], False),
    # without a set operator, a multi-valued key matches when any value does...
    ("StringEquals", ["a"], ["c", "a"], True),
    # ...and a negated operator holds only when no value matches
    ("StringNotEquals", ["a"], ["c", "a"], False),
    ("StringNotEquals", ["a"], ("c", "d"), True),
]


@pytest.mark.parametrize(("operator", "values", "value", "expected"), SETS)
def test_set_operators(operator: str, values: Any, value: Any, expected: bool) -> None:
    context = {} if value is None else {"loopwright:TagKeys": value}
    assert allowed_by({operator: {"loopwright:TagKeys": values}}, context) is expected


def test_negated_condition_on_a_deny_applies_to_a_missing_key() -> None:
    # Deny requests from outside the office network; without a source IP the deny applies too.
    deny = stmt("Deny", Condition={"NotIpAddress": {"loopwright:SourceIp": "203.0.113.0/24"}})
    assert decide(stmt(), deny, context={"loopwright:SourceIp": "203.0.113.9"}).allowed
    assert decide(stmt(), deny, context={"loopwright:SourceIp": "8.8.8.8"}).effect == "ExplicitDeny"
    assert decide(stmt(), deny).effect == "ExplicitDeny"


# -- policy variables ------------------------------------------------------------------------


def test_variable_in_resource_resolves_from_the_principal() -> None:
    own = stmt(resource="arn:loopwright:sessions::${loopwright:PrincipalAccount}:sampler/*")
    assert decide(own).allowed
    assert not decide(own, resource=SAMPLER.replace(ACCOUNT, OTHER)).allowed


def test_unresolvable_variable_means_the_statement_does_not_match() -> None:
    tagged = stmt(resource="arn:loopwright:sessions::*:sampler/${loopwright:Project}-*")
    assert not decide(tagged).allowed
    assert decide(tagged, context={"loopwright:Project": "smp"}).allowed
    deny = stmt("Deny", resource="arn:loopwright:sessions::*:sampler/${loopwright:Project}")
    assert decide(stmt(), deny).allowed  # the deny cannot be resolved, so it does not apply
    multi = {"loopwright:Project": ["smp", "other"]}  # multi-valued keys are no variables
    assert not decide(tagged, context=multi).allowed


def test_variable_default_and_literal_escapes() -> None:
    defaulted = stmt(resource="arn:loopwright:sessions::*:sampler/${loopwright:Project, 'smp'}-1")
    assert decide(defaulted).allowed
    assert not decide(defaulted, context={"loopwright:Project": "x"}).allowed
    star = {"StringEquals": {"loopwright:Label": "a${*}b"}}
    assert allowed_by(star, {"loopwright:Label": "a*b"})
    star_like = {"StringLike": {"loopwright:Label": "a${*}b"}}
    assert not allowed_by(star_like, {"loopwright:Label": "axxb"})
    assert allowed_by(star_like, {"loopwright:Label": "a*b"})


def test_substituted_values_are_literal_not_wildcards() -> None:
    condition = {"StringLike": {"loopwright:Label": "${loopwright:Prefix}-x"}}
    assert allowed_by(condition, {"loopwright:Prefix": "a*", "loopwright:Label": "a*-x"})
    assert not allowed_by(condition, {"loopwright:Prefix": "a*", "loopwright:Label": "abc-x"})


def test_variable_in_condition_value() -> None:
    condition = {"StringEquals": {"loopwright:ResourceTag/owner": "${loopwright:username}"}}
    assert allowed_by(condition, {"loopwright:ResourceTag/owner": "alice"})
    assert not allowed_by(condition, {"loopwright:ResourceTag/owner": "bob"})
    negated = {"StringNotEquals": {"loopwright:ResourceTag/owner": "${loopwright:Missing}"}}
    assert not allowed_by(negated, {"loopwright:ResourceTag/owner": "bob"})


def test_context_overrides_derived_principal_keys() -> None:
    own = stmt(resource="arn:loopwright:sessions::${loopwright:PrincipalAccount}:sampler/*")
    assert not decide(own, context={"loopwright:PrincipalAccount": OTHER}).allowed


def test_version_2008_treats_variables_as_text() -> None:
    literal = doc(
        stmt(Condition={"StringEquals": {"loopwright:Label": "${loopwright:username}"}}),
        version="2008-10-17",
    )
    request = AccessRequest("sessions:Sample", SAMPLER, ALICE, {"loopwright:Label": "alice"})
    assert not evaluate([("p", literal)], request).allowed
    request = AccessRequest(
        "sessions:Sample", SAMPLER, ALICE, {"loopwright:Label": "${loopwright:username}"}
    )
    assert evaluate([("p", literal)], request).allowed


# -- examples adapted from AWS's IAM documentation --------------------------------------------


def test_aws_example_if_exists() -> None:
    # "IAM JSON policy elements: Condition operators", ...IfExists: allow starting instances of
    # some types, and requests that carry no instance type at all.
    statement = stmt(
        action="sessions:CreateTrainingSession",
        Condition={"StringLikeIfExists": {"sessions:BaseModel": ["SmolLM2-*", "Qwen3-*"]}},
    )
    kwargs: dict[str, Any] = {"action": "sessions:CreateTrainingSession", "resource": SESSION}
    assert decide(statement, **kwargs).allowed
    assert decide(statement, **kwargs, context={"sessions:BaseModel": "Qwen3-8B"}).allowed
    assert not decide(statement, **kwargs, context={"sessions:BaseModel": "Llama-70B"}).allowed


def test_aws_example_multiple_keys_and_values() -> None:
    # "Conditions with multiple context keys or values": operators and keys AND, values OR.
    statement = stmt(
        Condition={
            "StringEquals": {
                "loopwright:PrincipalTag/department": ["finance", "hr", "legal"],
                "loopwright:PrincipalTag/role": ["audit", "security"],
            },
            "ArnLike": {
                "loopwright:PrincipalArn": [
                    f"arn:loopwright:iam::{ACCOUNT}:user/Ana",
                    f"arn:loopwright:iam::{ACCOUNT}:user/Mary",
                ]
            },
        }
    )
    mary = f"arn:loopwright:iam::{ACCOUNT}:user/Mary"
    tags = {"loopwright:PrincipalTag/department": "hr", "loopwright:PrincipalTag/role": "audit"}
    assert decide(statement, principal=mary, context=tags).allowed
    no_role = {"loopwright:PrincipalTag/department": "hr"}
    assert not decide(statement, principal=mary, context=no_role).allowed
    assert not decide(statement, principal=ALICE, context=tags).allowed


@pytest.mark.parametrize(
    ("role", "expected"), [("audit", True), ("security", True), ("other", False), (None, False)]
)
def test_aws_example_negated_operator_with_several_values(role: str | None, expected: bool) -> None:
    # "Conditions with multiple context keys or values", negated matching operators: the values
    # of StringNotEquals are NOR'ed, and a missing key makes the negated condition true.
    deny = stmt(
        "Deny",
        Condition={"StringNotEquals": {"loopwright:PrincipalTag/role": ["audit", "security"]}},
    )
    context = {} if role is None else {"loopwright:PrincipalTag/role": role}
    assert decide(stmt(), deny, context=context).allowed is expected


@pytest.mark.parametrize(
    ("tag_keys", "expected"),
    [
        (["environment"], True),
        (["environment", "cost-center"], True),
        (["environment", "owner"], False),
        (None, True),
    ],
)
def test_aws_example_for_all_values(tag_keys: list[str] | None, expected: bool) -> None:
    # "Multivalued context key examples": ForAllValues holds when every requested tag key is
    # listed, and also when the request carries no tag keys at all.
    statement = stmt(
        Condition={
            "ForAllValues:StringEquals": {"loopwright:TagKeys": ["environment", "cost-center"]}
        }
    )
    context = {} if tag_keys is None else {"loopwright:TagKeys": tag_keys}
    assert decide(statement, context=context).allowed is expected


def test_aws_example_null_check_closes_the_for_all_values_gap() -> None:
    # Same page: adding a Null check with "false" makes a missing key fail the statement.
    statement = stmt(
        Condition={
            "ForAllValues:StringEquals": {"loopwright:TagKeys": ["environment", "cost-center"]},
            "Null": {"loopwright:TagKeys": "false"},
        }
    )
    assert not decide(statement).allowed
    assert decide(statement, context={"loopwright:TagKeys": ["environment"]}).allowed


def test_aws_example_deny_by_source_ip() -> None:
    # "AWS: Denies access to AWS based on the source IP": deny everything from outside two
    # ranges unless the call is made by a service on the principal's behalf.
    deny = stmt(
        "Deny",
        Condition={
            "NotIpAddress": {"loopwright:SourceIp": ["192.0.2.0/24", "203.0.113.0/24"]},
            "Bool": {"loopwright:ViaLoopwrightService": "false"},
        },
    )
    inside = {"loopwright:SourceIp": "192.0.2.10", "loopwright:ViaLoopwrightService": False}
    outside = {"loopwright:SourceIp": "198.51.100.1", "loopwright:ViaLoopwrightService": False}
    via_service = {"loopwright:SourceIp": "198.51.100.1", "loopwright:ViaLoopwrightService": True}
    assert decide(stmt(), deny, context=inside).allowed
    assert decide(stmt(), deny, context=outside).effect == "ExplicitDeny"
    assert decide(stmt(), deny, context=via_service).allowed


def test_aws_example_user_home_prefix() -> None:
    # "IAM policy elements: Variables and tags": each user may reach only objects under a
    # prefix named after them (there: an S3 key prefix; here: a model package group).
    statement = stmt(
        action="registry:DownloadModelPackage",
        resource=f"arn:loopwright:registry::{ACCOUNT}:model-package/${{loopwright:username}}/*",
    )
    own = f"arn:loopwright:registry::{ACCOUNT}:model-package/alice/3"
    theirs = f"arn:loopwright:registry::{ACCOUNT}:model-package/bob/3"
    role = f"arn:loopwright:iam::{ACCOUNT}:role/ci"  # roles have no username
    kwargs: dict[str, Any] = {"action": "registry:DownloadModelPackage"}
    assert decide(statement, resource=own, **kwargs).allowed
    assert not decide(statement, resource=theirs, **kwargs).allowed
    assert not decide(statement, resource=own, principal=role, **kwargs).allowed


# -- trust policies --------------------------------------------------------------------------


def trust(*statements: dict[str, Any]) -> PolicyDocument:
    return PolicyDocument.parse(
        {"Version": "2012-10-17", "Statement": list(statements)}, kind="trust"
    )


def assume(principal: Any, effect: str = "Allow", **extra: Any) -> dict[str, Any]:
    return {"Effect": effect, "Action": "sts:AssumeRole", "Principal": principal, **extra}


@pytest.mark.parametrize(
    ("principal", "caller", "expected"),
    [
        ("*", ALICE, True),
        ("*", "sessions.loopwright.dev", True),
        ({"Loopwright": "*"}, ALICE, True),
        ({"Loopwright": "*"}, "sessions.loopwright.dev", False),
        ({"Loopwright": ACCOUNT}, ALICE, True),
        ({"Loopwright": ACCOUNT}, f"arn:loopwright:iam::{ACCOUNT}:role/ci", True),
        ({"Loopwright": OTHER}, ALICE, False),
        ({"Loopwright": [OTHER, ALICE]}, ALICE, True),
        ({"Loopwright": ALICE}, f"arn:loopwright:iam::{ACCOUNT}:user/bob", False),
        ({"Service": "sessions.loopwright.dev"}, "sessions.loopwright.dev", True),
        ({"Service": "sessions.loopwright.dev"}, "registry.loopwright.dev", False),
        ({"Service": "sessions.loopwright.dev", "Loopwright": ACCOUNT}, ALICE, True),
        ({"Loopwright": ACCOUNT}, "not-an-arn", False),
    ],
)
def test_trust_principal_matching(principal: Any, caller: str, expected: bool) -> None:
    assert evaluate_trust(trust(assume(principal)), caller).allowed is expected


def test_trust_deny_not_principal_and_conditions() -> None:
    policy = trust(
        assume(
            {"Loopwright": ACCOUNT},
            Sid="Account",
            Condition={"StringEquals": {"sts:ExternalId": "xyz"}},
        ),
        {
            "Sid": "OnlyAlice",
            "Effect": "Deny",
            "Action": "sts:*",
            "NotPrincipal": {"Loopwright": ALICE},
        },
    )
    allowed = evaluate_trust(policy, ALICE, context={"sts:ExternalId": "xyz"})
    assert (allowed.allowed, allowed.policy, allowed.statement) == (True, "trust", "Account")
    assert not evaluate_trust(policy, ALICE).allowed
    bob = f"arn:loopwright:iam::{ACCOUNT}:user/bob"
    denied = evaluate_trust(policy, bob, context={"sts:ExternalId": "xyz"}, policy_name="role/ci")
    assert denied.effect == "ExplicitDeny"
    assert denied.reason == "explicitly denied by statement 'OnlyAlice' of policy 'role/ci'"


def test_trust_checks_the_action_and_rejects_permission_policies() -> None:
    policy = trust(assume("*"))
    decision = evaluate_trust(policy, ALICE, action="sts:TagSession")
    assert decision.effect == "ImplicitDeny"
    assert (
        decision.reason == f"trust policy 'trust' does not allow {ALICE} to perform sts:TagSession"
    )
    with pytest.raises(ValueError, match="permission policy"):
        evaluate_trust(doc(stmt()), ALICE)


def test_trust_conditions_see_principal_keys() -> None:
    condition = {"StringEquals": {"loopwright:PrincipalAccount": ACCOUNT}}
    policy = trust(assume("*", Condition=condition))
    assert evaluate_trust(policy, ALICE).allowed
    assert not evaluate_trust(policy, ALICE.replace(ACCOUNT, OTHER)).allowed
