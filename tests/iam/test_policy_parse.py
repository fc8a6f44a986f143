"""Parsing policy documents: every invalid document names the exact JSON path at fault."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from controlplane.iam.actions import ACTIONS, matching_actions, resolve_action
from controlplane.iam.policy import MAX_POLICY_CHARS, PolicyDocument, PolicyError

ACCOUNT = "123456789012"
SESSION = f"arn:loopwright:sessions::{ACCOUNT}:session/*"


def permission(*statements: Any, **top: Any) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": list(statements), **top}


def allow(**extra: Any) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": "sessions:Sample", "Resource": "*", **extra}


def trust(*statements: dict[str, Any]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": list(statements)}


def assume(**extra: Any) -> dict[str, Any]:
    principal = {"Loopwright": f"arn:loopwright:iam::{ACCOUNT}:user/alice"}
    return {"Effect": "Allow", "Action": "sts:AssumeRole", "Principal": principal, **extra}


def without(statement: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in statement.items() if k != key}


BAD_PERMISSION: list[tuple[str, Any, str, str]] = [
    # (case, document, field, message fragment)
    ("not an object", [], "", "must be a JSON object"),
    ("invalid JSON text", "{not json", "", "invalid JSON"),
    (
        "duplicate JSON key",
        '{"Version": "2012-10-17", "Statement": {"Effect": "Allow", "Effect": "Deny"}}',
        "",
        "duplicate key 'Effect'",
    ),
    ("NaN in JSON text", '{"Version": NaN}', "", "NaN is not a JSON number"),
    ("no version", {"Statement": [allow()]}, "Version", "missing"),
    ("old version typo", permission(allow(), Version="2012-10-18"), "Version", "unsupported"),
    ("unknown top key", permission(allow(), Statements=[]), "", "unknown element 'Statements'"),
    ("id not a string", permission(allow(), Id=7), "Id", "must be a string"),
    ("no statement", {"Version": "2012-10-17"}, "Statement", "missing"),
    ("empty statement list", permission(), "Statement", "must not be empty"),
    ("statement not object", permission(allow(), "x"), "Statement[1]", "must be a JSON object"),
    ("unknown statement key", permission(allow(Effects="Allow")), "Statement[0]", "'Effects'"),
    ("sid not alphanumeric", permission(allow(Sid="no-dash")), "Statement[0].Sid", "alphanumeric"),
    ("sid empty", permission(allow(Sid="")), "Statement[0].Sid", "alphanumeric"),
    (
        "duplicate sid",
        permission(allow(Sid="A"), allow(Sid="B"), allow(Sid="A")),
        "Statement[2].Sid",
        "duplicate Sid 'A' (also in Statement[0])",
    ),
    ("effect lower case", permission(allow(Effect="allow")), "Statement[0].Effect", "got 'allow'"),
    ("no effect", permission(without(allow(), "Effect")), "Statement[0].Effect", "missing"),
    (
        "action and not action",
        permission(allow(NotAction="sessions:Forward")),
        "Statement[0]",
        "both Action and NotAction",
    ),
    ("no action", permission(without(allow(), "Action")), "Statement[0]", "needs Action"),
    ("empty action list", permission(allow(Action=[])), "Statement[0].Action", "empty list"),
    ("empty action string", permission(allow(Action="")), "Statement[0].Action", "empty"),
    (
        "action not a string",
        permission(allow(Action=["sessions:Sample", "sessions:Forward", 3])),
        "Statement[0].Action[2]",
        "must be a string",
    ),
    (
        "misspelt action",
        permission(allow(Action=["sessions:Forward", "sessions:ForwardBackwards"])),
        "Statement[0].Action[1]",
        "unknown action 'sessions:ForwardBackwards'",
    ),
    (
        "unknown service",
        permission(allow(Action="s3:GetObject")),
        "Statement[0].Action",
        "unknown service 's3'",
    ),
    ("action without service", permission(allow(Action="Sample")), "Statement[0].Action", "'*'"),
    (
        "wildcard matching no action",
        permission(allow(Action="kms:Frob*")),
        "Statement[0].Action",
        "matches no known action",
    ),
    (
        "resource and not resource",
        permission(allow(NotResource="*")),
        "Statement[0]",
        "both Resource and NotResource",
    ),
    ("no resource", permission(without(allow(), "Resource")), "Statement[0]", "needs Resource"),
    (
        "principal in permission policy",
        permission(allow(Principal="*")),
        "Statement[0].Principal",
        "not allowed in a permission policy",
    ),
    (
        "resource of another partition",
        permission(allow(Resource=["*", "arn:aws:s3:::bucket"])),
        "Statement[0].Resource[1]",
        "unknown partition 'aws'",
    ),
    (
        "resource not an arn",
        permission(allow(Resource="session/abc")),
        "Statement[0].Resource",
        "must start with 'arn:'",
    ),
    (
        "resource of unknown service",
        permission(allow(Resource=f"arn:loopwright:s3::{ACCOUNT}:bucket/x")),
        "Statement[0].Resource",
        "unknown service 's3'",
    ),
    (
        "resource of unknown type",
        permission(allow(Resource=f"arn:loopwright:sessions::{ACCOUNT}:sesion/x")),
        "Statement[0].Resource",
        "unknown resource type 'sesion'",
    ),
    (
        "resource with a region",
        permission(allow(Resource=f"arn:loopwright:sessions:eu-west-1:{ACCOUNT}:session/x")),
        "Statement[0].Resource",
        "region must be empty",
    ),
    (
        "resource of a service without ARNs",
        permission(allow(Resource=f"arn:loopwright:audit::{ACCOUNT}:event/1")),
        "Statement[0].Resource",
        "has no resource ARNs",
    ),
    (
        "malformed policy variable",
        permission(allow(Resource="arn:loopwright:sessions::${loopwright:Acct:session/*")),
        "Statement[0].Resource",
        "unterminated policy variable",
    ),
    (
        "variable of unknown prefix",
        permission(allow(Resource="arn:loopwright:sessions::${aws:PrincipalAccount}:session/*")),
        "Statement[0].Resource",
        "unknown condition key prefix 'aws'",
    ),
    (
        "condition not an object",
        permission(allow(), allow(Condition=["StringLike"])),
        "Statement[1].Condition",
        "must be an object",
    ),
    (
        "unknown condition operator",
        permission(allow(), allow(Condition={"StringLikes": {"loopwright:Tag": "a"}})),
        "Statement[1].Condition",
        "unknown condition operator 'StringLikes'",
    ),
    (
        "operator in the wrong case",
        permission(allow(Condition={"stringlike": {"loopwright:Tag": "a"}})),
        "Statement[0].Condition",
        "did you mean 'StringLike'",
    ),
    (
        "null with if exists",
        permission(allow(Condition={"NullIfExists": {"loopwright:Tag": "true"}})),
        "Statement[0].Condition",
        "Null takes no IfExists",
    ),
    (
        "null with a set prefix",
        permission(allow(Condition={"ForAnyValue:Null": {"loopwright:Tag": "true"}})),
        "Statement[0].Condition",
        "Null takes no ForAnyValue",
    ),
    (
        "unknown set prefix",
        permission(allow(Condition={"ForSomeValues:StringLike": {"loopwright:Tag": "a"}})),
        "Statement[0].Condition",
        "unknown condition operator",
    ),
    (
        "empty operator block",
        permission(allow(Condition={"StringLike": {}})),
        "Statement[0].Condition.StringLike",
        "non-empty object",
    ),
    (
        "condition key without prefix",
        permission(allow(Condition={"StringLike": {"Tag": "a"}})),
        "Statement[0].Condition.StringLike",
        "invalid condition key 'Tag'",
    ),
    (
        "condition key of unknown prefix",
        permission(allow(Condition={"StringLike": {"aws:SourceIp": "a"}})),
        "Statement[0].Condition.StringLike",
        "unknown condition key prefix 'aws'",
    ),
    (
        "condition key repeated in another case",
        permission(
            allow(Condition={"StringEquals": {"loopwright:Tag": "a", "LOOPWRIGHT:tag": "b"}})
        ),
        "Statement[0].Condition.StringEquals",
        "repeats",
    ),
    (
        "empty value list",
        permission(allow(Condition={"StringEquals": {"loopwright:Tag": []}})),
        "Statement[0].Condition.StringEquals",
        "empty list of values",
    ),
    (
        "null value",
        permission(allow(Condition={"StringEquals": {"loopwright:Tag": None}})),
        "Statement[0].Condition.StringEquals",
        "must be a string, number or boolean",
    ),
    (
        "numeric value not a number",
        permission(allow(Condition={"NumericLessThan": {"loopwright:Gpus": ["4", "four"]}})),
        "Statement[0].Condition.NumericLessThan",
        "value 'four' of key 'loopwright:Gpus' is not a number",
    ),
    (
        "numeric boolean",
        permission(allow(Condition={"NumericEquals": {"loopwright:Gpus": True}})),
        "Statement[0].Condition.NumericEquals",
        "is not a number",
    ),
    (
        "date value not a date",
        permission(allow(Condition={"DateGreaterThan": {"loopwright:CurrentTime": "yesterday"}})),
        "Statement[0].Condition.DateGreaterThan",
        "ISO-8601",
    ),
    (
        "bool value not a boolean",
        permission(allow(Condition={"Bool": {"loopwright:SecureTransport": "yes"}})),
        "Statement[0].Condition.Bool",
        "is not true or false",
    ),
    (
        "ip value not a network",
        permission(allow(Condition={"IpAddress": {"loopwright:SourceIp": "10.0.0.0/33"}})),
        "Statement[0].Condition.IpAddress",
        "CIDR",
    ),
    (
        "arn value not an arn",
        permission(allow(Condition={"ArnLike": {"loopwright:PrincipalArn": "role/*"}})),
        "Statement[0].Condition.ArnLike",
        "is not an ARN",
    ),
    (
        "binary value not base64",
        permission(allow(Condition={"BinaryEquals": {"loopwright:Blob": "***"}})),
        "Statement[0].Condition.BinaryEquals",
        "base64",
    ),
    (
        "null value not a boolean",
        permission(allow(Condition={"Null": {"loopwright:Tag": "maybe"}})),
        "Statement[0].Condition.Null",
        "is not true or false",
    ),
    (
        "string variable malformed",
        permission(allow(Condition={"StringLike": {"loopwright:Tag": "${nope}"}})),
        "Statement[0].Condition.StringLike",
        "invalid condition key 'nope'",
    ),
]


@pytest.mark.parametrize(
    ("document", "field", "fragment"),
    [pytest.param(doc, field, frag, id=case) for case, doc, field, frag in BAD_PERMISSION],
)
def test_invalid_permission_policies(document: Any, field: str, fragment: str) -> None:
    with pytest.raises(PolicyError) as caught:
        PolicyDocument.parse(document)
    assert caught.value.field == field
    assert fragment in caught.value.message


BAD_TRUST: list[tuple[str, Any, str, str]] = [
    ("no principal", trust(without(assume(), "Principal")), "Statement[0]", "needs Principal"),
    (
        "resource in trust policy",
        trust(assume(Resource="*")),
        "Statement[0].Resource",
        "not allowed in a trust policy",
    ),
    (
        "principal and not principal",
        trust(assume(NotPrincipal="*")),
        "Statement[0]",
        "both Principal and NotPrincipal",
    ),
    (
        "unknown principal type",
        trust(assume(Principal={"AWS": "*"})),
        "Statement[0].Principal",
        "unknown principal type 'AWS'",
    ),
    ("empty principal", trust(assume(Principal={})), "Statement[0].Principal", "must be"),
    (
        "wildcard principal arn",
        trust(assume(Principal={"Loopwright": [ACCOUNT, f"arn:loopwright:iam::{ACCOUNT}:user/*"]})),
        "Statement[0].Principal.Loopwright[1]",
        "wildcards are not allowed",
    ),
    (
        "principal of a session",
        trust(assume(Principal={"Loopwright": f"arn:loopwright:sessions::{ACCOUNT}:session/1"})),
        "Statement[0].Principal.Loopwright",
        "not the ARN of an iam user or role",
    ),
    (
        "short account id",
        trust(assume(Principal={"Loopwright": "12345"})),
        "Statement[0].Principal.Loopwright",
        "must start with 'arn:'",
    ),
    (
        "service principal of another domain",
        trust(assume(Principal={"Service": ["sessions.loopwright.dev", "ec2.amazonaws.com"]})),
        "Statement[0].Principal.Service[1]",
        "not a service principal",
    ),
    (
        "non sts action in trust policy",
        trust(assume(Action=["sts:AssumeRole", "iam:PassRole"])),
        "Statement[0].Action[1]",
        "only sts actions",
    ),
]


@pytest.mark.parametrize(
    ("document", "field", "fragment"),
    [pytest.param(doc, field, frag, id=case) for case, doc, field, frag in BAD_TRUST],
)
def test_invalid_trust_policies(document: Any, field: str, fragment: str) -> None:
    with pytest.raises(PolicyError) as caught:
        PolicyDocument.parse(document, kind="trust")
    assert caught.value.field == field
    assert fragment in caught.value.message


def test_error_text_reads_field_then_message() -> None:
    doc = permission(allow(), allow(Condition={"StringLikes": {"loopwright:Tag": "a"}}))
    with pytest.raises(PolicyError) as caught:
        PolicyDocument.parse(doc)
    assert str(caught.value) == "Statement[1].Condition: unknown condition operator 'StringLikes'"
    assert isinstance(caught.value, ValueError)


def test_kind_must_be_known() -> None:
    with pytest.raises(ValueError, match="kind must be"):
        PolicyDocument.parse(permission(allow()), kind="Trust")  # type: ignore[arg-type]


def test_single_statement_object_uses_plain_path() -> None:
    doc = {"Version": "2012-10-17", "Statement": allow(Effect="Permit")}
    with pytest.raises(PolicyError) as caught:
        PolicyDocument.parse(doc)
    assert caught.value.field == "Statement.Effect"


def test_size_limit_names_the_limit() -> None:
    many = [f"arn:loopwright:sessions::{ACCOUNT}:session/s{i:05d}" for i in range(200)]
    with pytest.raises(PolicyError) as caught:
        PolicyDocument.parse(permission(allow(Resource=many)))
    assert caught.value.field == ""
    assert f"the limit is {MAX_POLICY_CHARS}" in caught.value.message


def test_size_counts_compact_json_not_whitespace() -> None:
    doc = permission(allow())
    padded = json.dumps(doc, indent=40)
    assert len(padded) > MAX_POLICY_CHARS / 10
    assert PolicyDocument.parse(padded).to_dict() == doc


GOOD: list[tuple[str, dict[str, Any], str]] = [
    ("minimal", permission(allow()), "permission"),
    ("single statement object", {"Version": "2012-10-17", "Statement": allow()}, "permission"),
    ("old version", permission(allow(), Version="2008-10-17"), "permission"),
    (
        "everything",
        permission(
            allow(
                Sid="TrainOwnSessions",
                Action=["sessions:*", "registry:Describe*", "SESSIONS:sample"],
                Resource=[
                    "arn:loopwright:sessions::${loopwright:PrincipalAccount}:session/*",
                    "arn:loopwright:registry::123456789012:model-package/grp/*",
                    "arn:loopwright:*:*:123456789012:*",
                ],
                Condition={
                    "StringEquals": {"loopwright:RequestTag/team": ["ml", "research"]},
                    "ForAllValues:StringLikeIfExists": {"loopwright:TagKeys": "team*"},
                    "NumericLessThanEquals": {"sessions:GpuCount": 8, "sessions:Rank": "32"},
                    "DateLessThan": {"loopwright:CurrentTime": "2030-01-01T00:00:00Z"},
                    "DateGreaterThan": {"loopwright:TokenIssueTime": 1700000000},
                    "Bool": {"loopwright:MultiFactorAuthPresent": True},
                    "IpAddress": {"loopwright:SourceIp": ["10.0.0.0/8", "2001:db8::/32"]},
                    "ArnLike": {"loopwright:PrincipalArn": "arn:loopwright:iam::*:role/ci-*"},
                    "BinaryEquals": {"loopwright:Blob": "QmluYXJ5"},
                    "Null": {"loopwright:Expiry": "false"},
                },
            ),
            {
                "Sid": "NoKeyDeletion",
                "Effect": "Deny",
                "NotAction": ["kms:Describe*", "kms:List*"],
                "NotResource": "arn:loopwright:kms::123456789012:key/dev-*",
            },
            Id="trainer-policy",
        ),
        "permission",
    ),
    (
        "trust",
        trust(
            assume(Sid="Alice"),
            {
                "Effect": "Allow",
                "Action": ["sts:AssumeRole"],
                "Principal": {
                    "Loopwright": [ACCOUNT, "arn:loopwright:iam::210987654321:role/ci"],
                    "Service": "sessions.loopwright.dev",
                },
                "Condition": {"StringEquals": {"sts:ExternalId": "xyz"}},
            },
            {"Effect": "Deny", "Action": "sts:*", "NotPrincipal": "*"},
        ),
        "trust",
    ),
]


@pytest.mark.parametrize(
    ("document", "kind"), [pytest.param(doc, kind, id=case) for case, doc, kind in GOOD]
)
def test_good_documents_round_trip(document: dict[str, Any], kind: Any) -> None:
    original = copy.deepcopy(document)
    parsed = PolicyDocument.parse(document, kind=kind)
    assert parsed.to_dict() == original
    assert PolicyDocument.parse(parsed.to_json(), kind=kind) == parsed
    assert document == original  # parsing does not modify its input


def test_parsed_statement_fields() -> None:
    doc = PolicyDocument.parse(GOOD[3][1])
    first, second = doc.statements
    assert (first.sid, first.label, first.effect, first.not_action) == (
        "TrainOwnSessions",
        "TrainOwnSessions",
        "Allow",
        False,
    )
    assert second.not_action and second.not_resource and second.effect == "Deny"
    operators = {c.operator for c in first.conditions}
    assert "ForAllValues:StringLikeIfExists" in operators
    tagged = next(c for c in first.conditions if c.qualifier == "ForAllValues")
    assert (tagged.base, tagged.if_exists) == ("StringLike", True)
    assert PolicyDocument.parse(permission(allow(), allow())).statements[1].label == "#1"


def test_variables_only_in_current_version() -> None:
    assert PolicyDocument.parse(permission(allow())).variables
    assert not PolicyDocument.parse(permission(allow(), Version="2008-10-17")).variables
    # in 2008-10-17, "${" is plain text and not validated as a variable
    literal = allow(Condition={"StringEquals": {"loopwright:Tag": "${oops"}})
    PolicyDocument.parse(permission(literal, Version="2008-10-17"))


def test_action_catalogue() -> None:
    assert resolve_action("SESSIONS:forwardbackward") == "sessions:ForwardBackward"
    with pytest.raises(LookupError, match="unknown action"):
        resolve_action("sessions:Nope")
    assert matching_actions("kms:*Key") == [
        "kms:CreateKey",
        "kms:DescribeKey",
        "kms:EnableKey",
        "kms:DisableKey",
        "kms:RotateKey",
        "kms:GenerateDataKey",
    ]
    assert matching_actions("registry:?eleteModelPackage") == ["registry:DeleteModelPackage"]
    assert len(matching_actions("*")) == len(ACTIONS) == 86
    assert ACTIONS["sessions:ListBaseModels"].resource_type == "*"
    assert ACTIONS["registry:DownloadModelPackage"].resource_type == "model-package"
    assert ACTIONS["sts:AssumeRole"].service == "sts"
