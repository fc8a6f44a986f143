"""ARNs: parsing, building, account ids and ArnLike matching."""

from __future__ import annotations

import pytest

from controlplane.iam.arns import (
    PARTITION,
    Arn,
    ArnError,
    arn_like,
    build_arn,
    check_arn_pattern,
    is_account_id,
)

ACCOUNT = "123456789012"


def test_parse_role_arn() -> None:
    arn = Arn.parse(f"arn:loopwright:iam::{ACCOUNT}:role/trainer")
    assert arn == Arn("iam", ACCOUNT, "role", "trainer")
    assert arn.region == ""
    assert arn.resource == "role/trainer"
    assert str(arn) == f"arn:loopwright:iam::{ACCOUNT}:role/trainer"


def test_resource_id_may_contain_slashes_and_colons() -> None:
    arn = Arn.parse(f"arn:loopwright:registry::{ACCOUNT}:model-package/my-group/3")
    assert (arn.resource_type, arn.resource_id) == ("model-package", "my-group/3")
    odd = Arn.parse(f"arn:loopwright:sessions::{ACCOUNT}:checkpoint/s1:weights/0001")
    assert odd.resource_id == "s1:weights/0001"


def test_build_arn_round_trips() -> None:
    text = build_arn("registry", ACCOUNT, "model-package", "grp/7")
    assert text == f"arn:{PARTITION}:registry::{ACCOUNT}:model-package/grp/7"
    assert str(Arn.parse(text)) == text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("role/trainer", "must start with 'arn:'"),
        ("arn:loopwright:iam", "six colon-separated parts"),
        (f"arn:aws:iam::{ACCOUNT}:role/x", "unknown partition 'aws'"),
        (f"arn:loopwright:IAM::{ACCOUNT}:role/x", "invalid service 'IAM'"),
        (f"arn:loopwright:iam:eu-west-1:{ACCOUNT}:role/x", "region must be empty"),
        ("arn:loopwright:iam::12345:role/x", "12-digit account id, got '12345'"),
        ("arn:loopwright:iam:::role/x", "12-digit account id, got ''"),
        (f"arn:loopwright:iam::{ACCOUNT}:root", "resource must be '<type>/<id>'"),
        (f"arn:loopwright:iam::{ACCOUNT}:role/", "resource id must not be empty"),
        (f"arn:loopwright:iam::{ACCOUNT}:/x", "invalid resource type ''"),
        (f"arn:loopwright:iam::{ACCOUNT}:role/a\nb", "control characters"),
    ],
)
def test_parse_errors_are_precise(text: str, message: str) -> None:
    with pytest.raises(ArnError, match=message):
        Arn.parse(text)


def test_arn_error_is_a_value_error() -> None:
    assert issubclass(ArnError, ValueError)
    with pytest.raises(ValueError):
        build_arn("iam", "nope", "role", "x")


@pytest.mark.parametrize(
    ("value", "expected"),
    [(ACCOUNT, True), ("12345678901", False), ("1234567890123", False), ("12345678901a", False)],
)
def test_is_account_id(value: str, expected: bool) -> None:
    assert is_account_id(value) is expected


def test_is_account_id_rejects_non_ascii_digits_and_non_strings() -> None:
    assert not is_account_id("١٢٣٤٥٦٧٨٩٠١٢")  # Arabic-Indic digits
    assert not is_account_id(123456789012)


ROLE = f"arn:loopwright:iam::{ACCOUNT}:role/trainer"


@pytest.mark.parametrize(
    ("pattern", "arn", "expected"),
    [
        ("*", ROLE, True),
        ("*", "anything at all", True),
        (ROLE, ROLE, True),
        (f"arn:loopwright:iam::{ACCOUNT}:role/*", ROLE, True),
        (f"arn:loopwright:iam::{ACCOUNT}:role/train?r", ROLE, True),
        (f"arn:loopwright:iam::{ACCOUNT}:role/Trainer", ROLE, False),  # case-sensitive
        ("arn:loopwright:iam::*:role/trainer", ROLE, True),
        ("arn:loopwright:*:*:*:*", ROLE, True),
        # each part is matched separately: a '*' in the service does not reach the account
        ("arn:loopwright:*:role/trainer", ROLE, False),
        (f"arn:loopwright:iam::{ACCOUNT}:user/*", ROLE, False),
        (f"arn:loopwright:iam::{ACCOUNT}:role/*", "not-an-arn", False),
        (
            f"arn:loopwright:registry::{ACCOUNT}:model-package/grp/*",
            f"arn:loopwright:registry::{ACCOUNT}:model-package/grp/3",
            True,
        ),
    ],
)
def test_arn_like(pattern: str, arn: str, expected: bool) -> None:
    assert arn_like(pattern, arn) is expected


@pytest.mark.parametrize(
    "pattern",
    [
        "*",
        "arn:loopwright:sessions::*:session/*",
        "arn:*:sessions::123456789012:session/abc",
        "arn:loopwright:sessions:*:12345678901?:*",
    ],
)
def test_valid_arn_patterns(pattern: str) -> None:
    check_arn_pattern(pattern)


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("arn:aws:s3:::bucket", "unknown partition"),
        ("arn:loopwright:sessions:us-east-1:*:session/x", "region must be empty"),
        ("arn:loopwright:sessions::abc*:session/x", "account must be"),
        ("arn:loopwright:sessions::123456789012:", "resource part must not be empty"),
    ],
)
def test_invalid_arn_patterns(pattern: str, message: str) -> None:
    with pytest.raises(ArnError, match=message):
        check_arn_pattern(pattern)
