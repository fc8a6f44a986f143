"""Policy wildcards match in linear time: the matcher agrees with a regular-expression reference
on small inputs, takes one step per character of the text on adversarial patterns, and a policy
past the limits on wildcards and condition values is refused when it is written."""

from __future__ import annotations

import html
import json
import re
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.iam.arns import arn_like
from controlplane.iam.evaluation import AccessRequest, evaluate
from controlplane.iam.globs import LITERAL_QMARK, LITERAL_STAR, glob_match, glob_steps
from controlplane.iam.policy import PolicyDocument
from controlplane.iam.policy_limits import (
    MAX_CONDITION_VALUE_CHARS,
    MAX_CONDITION_VALUES,
    MAX_DOCUMENT_CONDITION_VALUES,
    MAX_PATTERN_WILDCARDS,
    check_policy_limits,
)

from .served import Served, browser, csrf

PROPERTIES = settings(max_examples=400, deadline=None, database=None)
ALPHABET = "ab*?" + LITERAL_STAR + LITERAL_QMARK


def reference(pattern: str, text: str, *, ignore_case: bool = False) -> bool:
    """The matcher as it was: the pattern translated to a regular expression (backtracking,
    fine on inputs this small)."""
    translation = {"*": ".*", "?": ".", LITERAL_STAR: r"\*", LITERAL_QMARK: r"\?"}
    body = "".join(translation.get(c) or re.escape(c) for c in pattern)
    flags = re.DOTALL | (re.IGNORECASE if ignore_case else 0)
    return re.fullmatch(body, text, flags) is not None


@PROPERTIES
@given(st.text(ALPHABET, max_size=10), st.text("ab*?\n", max_size=14))
def test_matches_like_the_regular_expression_reference(pattern: str, text: str) -> None:
    assert glob_match(pattern, text) == reference(pattern, text)


@PROPERTIES
@given(st.text("aAbB*?", max_size=8), st.text("aAbB", max_size=12))
def test_actions_match_ignoring_case_like_the_reference(pattern: str, text: str) -> None:
    assert glob_match(pattern, text, ignore_case=True) == reference(pattern, text, ignore_case=True)


@PROPERTIES
@given(
    st.lists(st.text("ab*?:/", max_size=5), min_size=6, max_size=6), st.text("ab:/", max_size=16)
)
def test_arn_like_globs_each_part_like_the_reference(parts: list[str], arn: str) -> None:
    pattern = ":".join(parts)
    pattern_parts, arn_parts = pattern.split(":", 5), arn.split(":", 5)
    expected = len(arn_parts) == 6 and all(
        reference(p, a) for p, a in zip(pattern_parts, arn_parts, strict=True)
    )
    assert arn_like(pattern, arn) == expected


ADVERSARIAL = [
    "*a*a*a*a*a*b",  # the pattern of the review: hours against a long User-Agent
    "*" + "a*" * 15 + "b",
    "?" * 16,
    "*a?a?a?a?a?a?a?a*b",
    "a*" * 8 + "?" * 8,
    "*" + "ab" * 200 + "*c",
]


def test_adversarial_patterns_take_one_step_per_character() -> None:
    for text in ("a" * 10_000, "ab" * 5_000, "a" * 9_999 + "c"):
        for pattern in ADVERSARIAL:
            matched, steps = glob_steps(pattern, text)
            assert steps <= len(text), (pattern, steps)
            assert matched == reference_linear(pattern, text)


def reference_linear(pattern: str, text: str) -> bool:
    """An independent answer for long inputs: dynamic programming over (pattern, text)."""
    row = [True] + [False] * len(text)
    for p in pattern:
        if p == "*":
            for t in range(1, len(text) + 1):
                row[t] = row[t] or row[t - 1]
        else:
            row = [False] + [row[t] and (p == "?" or p == text[t]) for t in range(len(text))]
    return row[-1]


def test_a_ten_thousand_character_input_is_matched_at_once() -> None:
    """A sanity check of the step bound in seconds (speed itself is measured in bench/): every
    adversarial pattern against every 10,000-character text, together, well under a second
    where the regular expression of old ran for hours on one."""
    started = time.process_time()
    for text in ("a" * 10_000, "ab" * 5_000):
        for pattern in ADVERSARIAL:
            glob_match(pattern, text)
    assert time.process_time() - started < 5


def test_evaluation_of_the_review_policy_against_a_long_user_agent() -> None:
    policy = PolicyDocument.parse(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Action": "sessions:*",
                    "Resource": "*",
                    "Condition": {"StringLike": {"loopwright:UserAgent": "*a*a*a*a*a*b"}},
                }
            ],
        }
    )
    for agent, allowed in (("a" * 10_000, False), ("a" * 9_999 + "b", True)):
        request = AccessRequest("sessions:Sample", "*", context={"loopwright:UserAgent": agent})
        assert evaluate([("p", policy)], request).allowed is allowed


def _document(statement: dict) -> PolicyDocument:
    return PolicyDocument.parse({"Version": "2012-10-17", "Statement": [statement]})


def _refusal(statement: dict) -> tuple[str, str]:
    try:
        check_policy_limits(_document(statement))
    except ValueError as error:
        return error.field, error.message  # type: ignore[attr-defined]
    raise AssertionError("accepted")


def test_limits_name_the_element_and_the_limit() -> None:
    many = "sessions:" + "*" * (MAX_PATTERN_WILDCARDS + 1)
    field, message = _refusal(
        {"Effect": "Allow", "Action": ["sessions:Get*", many], "Resource": "*"}
    )
    assert field == "Statement[0].Action[1]" and str(MAX_PATTERN_WILDCARDS) in message
    resource = "arn:loopwright:sessions::123456789012:session/" + "?" * 17
    field, _ = _refusal({"Effect": "Allow", "Action": "sessions:*", "Resource": resource})
    assert field == "Statement[0].Resource"
    like = {"StringLike": {"loopwright:UserAgent": "*" + "a?" * 16}}
    field, _ = _refusal({"Effect": "Allow", "Action": "*", "Resource": "*", "Condition": like})
    assert field == "Statement[0].Condition.StringLike"
    long_value = {"StringEquals": {"loopwright:UserAgent": "x" * (MAX_CONDITION_VALUE_CHARS + 1)}}
    field, message = _refusal(
        {"Effect": "Allow", "Action": "*", "Resource": "*", "Condition": long_value}
    )
    assert field == "Statement[0].Condition.StringEquals"
    assert str(MAX_CONDITION_VALUE_CHARS) in message
    values = [f"v{i}" for i in range(MAX_CONDITION_VALUES + 1)]
    field, message = _refusal(
        {
            "Effect": "Allow",
            "Action": "*",
            "Resource": "*",
            "Condition": {"StringEquals": {"loopwright:UserAgent": values}},
        }
    )
    assert str(MAX_CONDITION_VALUES) in message


def test_literal_stars_and_values_within_the_limits_are_kept() -> None:
    within = "*a" * (MAX_PATTERN_WILDCARDS // 2)
    check_policy_limits(
        _document(
            {
                "Effect": "Allow",
                "Action": "*",
                "Resource": "*",
                "Condition": {
                    "StringLike": {"loopwright:UserAgent": [within, "${*}" * 40]},
                    "StringEquals": {"loopwright:SourceIp": ["x" * MAX_CONDITION_VALUE_CHARS]},
                },
            }
        )
    )


def test_condition_values_of_a_document_are_capped_together() -> None:
    statements = [
        {
            "Effect": "Allow",
            "Action": "*",
            "Resource": "*",
            "Condition": {"StringEquals": {"loopwright:UserAgent": [str(n) for n in range(20)]}},
        }
        for _ in range(MAX_DOCUMENT_CONDITION_VALUES // 20 + 1)
    ]
    document = PolicyDocument.parse({"Version": "2012-10-17", "Statement": statements})
    try:
        check_policy_limits(document)
    except ValueError as error:
        assert str(MAX_DOCUMENT_CONDITION_VALUES) in str(error)
    else:
        raise AssertionError("accepted")


# -- against a live stack ----------------------------------------------------------------------

REVIEW_PATTERN = "*a*a*a*a*a*b"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    running = Served(tmp_path_factory.mktemp("policy-matching")).start()
    try:
        yield running
    finally:
        running.stop()


def _deny_agents(pattern: str) -> dict:
    condition = {"StringLike": {"loopwright:UserAgent": pattern}}
    statement = {"Effect": "Deny", "Action": "iam:ListUsers", "Resource": "*"}
    return {"Version": "2012-10-17", "Statement": [statement | {"Condition": condition}]}


@pytest.mark.e2e
def test_the_review_pattern_against_a_long_user_agent_stalls_nobody(served) -> None:
    """The policy of the review on alice's own requests, with a User-Agent as long as a header
    may be: alice is answered, and charlie, asking at the same time, too (the backtracking
    matcher ran for hours on such input and held every other tenant's request)."""
    alice, charlie = served.signup("alice", "127.0.0.11"), served.signup("charlie", "127.0.0.12")
    policy_url = "/api/v1/iam/users/alice@example.com/policies/agents"
    with served.client("127.0.0.11", headers={"X-API-Key": alice["api_key"]}) as client:
        r = client.put(policy_url, json={"document": _deny_agents(REVIEW_PATTERN)})
        assert r.status_code == 200, r.text
        outcomes: dict[str, int] = {}

        def others() -> None:
            with served.client("127.0.0.12", headers={"X-API-Key": charlie["api_key"]}) as c:
                outcomes["charlie"] = c.get("/api/v1/auth/whoami").status_code

        for agent, status in (("a" * 8000, 200), ("a" * 7999 + "b", 403)):
            other = threading.Thread(target=others)
            other.start()
            r = client.get("/api/v1/iam/users", headers={"User-Agent": agent})
            other.join()
            assert r.status_code == status, r.text
            assert outcomes["charlie"] == 200
        r = client.put(policy_url, json={"document": _deny_agents("*a" * 16 + "*b")})
        assert r.status_code == 400
        assert r.json()["field"] == "document.Statement[0].Condition.StringLike"
        assert "the limit is 16" in r.json()["detail"]


@pytest.mark.e2e
def test_the_dashboard_editor_refuses_a_policy_past_the_limits(served) -> None:
    served.signup("dana", "127.0.0.13")
    dana = browser(served, "127.0.0.13", "dana@example.com")
    try:
        url = "/iam/users/dana@example.com/policies/new"
        document = json.dumps(_deny_agents("*a" * 16 + "*b"), indent=2)
        r = dana.post(
            url,
            data={
                "policy_name": "agents",
                "document": document,
                "csrfmiddlewaretoken": csrf(dana, url),
            },
        )
        assert r.status_code == 400
        assert "the limit is 16" in html.unescape(r.text)
        assert dana.get("/iam/users/dana@example.com/policies/agents").status_code == 404
    finally:
        dana.close()
