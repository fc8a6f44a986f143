"""Properties of evaluation and parsing, checked on generated policies and requests."""

from __future__ import annotations

from functools import cache
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.iam.actions import ACTIONS, RESOURCE_TYPES, matching_actions
from controlplane.iam.arns import arn_like, build_arn
from controlplane.iam.evaluation import AccessRequest, Decision, evaluate
from controlplane.iam.globs import glob_match
from controlplane.iam.policy import PolicyDocument

PROPERTIES = settings(max_examples=150, deadline=None, database=None)
ACCOUNTS = ("123456789012", "210987654321")
TEAMS = ("ml", "ops", "research")
ACTION_NAMES = sorted(ACTIONS)
# Requests use a few actions so that generated policies often speak about them.
REQUEST_ACTIONS = ["sessions:Sample", "sessions:ForwardBackward", "kms:Decrypt", "iam:PassRole"]

Doc = dict[str, Any]


# -- a reference glob matcher, written independently of the regex translation ----------------


def reference_match(pattern: str, text: str) -> bool:
    @cache
    def match(p: int, t: int) -> bool:
        if p == len(pattern):
            return t == len(text)
        if pattern[p] == "*":
            return match(p + 1, t) or (t < len(text) and match(p, t + 1))
        if t == len(text):
            return False
        return (pattern[p] == "?" or pattern[p] == text[t]) and match(p + 1, t + 1)

    return match(0, 0)


def reference_arn_like(pattern: str, arn: str) -> bool:
    if pattern == "*":
        return True
    pattern_parts, arn_parts = pattern.split(":", 5), arn.split(":", 5)
    if len(pattern_parts) < 6 or len(arn_parts) < 6:
        return False
    return all(reference_match(p, a) for p, a in zip(pattern_parts, arn_parts, strict=True))


# -- strategies ------------------------------------------------------------------------------


@st.composite
def mangled_case(draw: st.DrawFn, text: str) -> str:
    flips = draw(st.lists(st.booleans(), min_size=len(text), max_size=len(text)))
    return "".join(c.swapcase() if flip else c for c, flip in zip(text, flips, strict=True))


@st.composite
def action_pattern_for(draw: st.DrawFn, action: str) -> str:
    """A valid action pattern that matches ``action``."""
    service, name = action.split(":")
    cut = draw(st.integers(0, len(name)))
    choice = draw(st.sampled_from(["exact", "service", "any", "prefix", "single", "any-service"]))
    pattern = {
        "exact": action,
        "service": f"{service}:*",
        "any": "*",
        "prefix": f"{service}:{name[:cut]}*",
        "single": f"{service}:{name[:cut]}?{name[cut + 1 :]}" if cut < len(name) else action,
        "any-service": f"*:{name}",
    }[choice]
    return draw(mangled_case(pattern))


action_patterns = st.one_of(
    st.sampled_from(REQUEST_ACTIONS), st.sampled_from(ACTION_NAMES)
).flatmap(action_pattern_for)

resource_choices = [
    (service, kind) for service, kinds in RESOURCE_TYPES.items() for kind in sorted(kinds)
]


@st.composite
def resources(draw: st.DrawFn) -> str:
    service, kind = draw(st.sampled_from(resource_choices))
    resource_id = draw(st.sampled_from(["a", "b", "a/1", "b/2"]))
    return build_arn(service, draw(st.sampled_from(ACCOUNTS)), kind, resource_id)


@st.composite
def resource_pattern_for(draw: st.DrawFn, arn: str) -> str:
    """A valid resource pattern that matches ``arn``."""
    parts = arn.split(":", 5)
    choice = draw(st.sampled_from(["any", "exact", "account", "id", "service"]))
    if choice == "any":
        return "*"
    if choice == "account":
        parts[4] = "*"
    elif choice == "id":
        parts[5] = parts[5].split("/")[0] + "/*"
    elif choice == "service":
        parts[2], parts[5] = "*", "*"
    return ":".join(parts)


resource_patterns = resources().flatmap(resource_pattern_for)

conditions = st.one_of(
    st.fixed_dictionaries(
        {"StringEquals": st.fixed_dictionaries({"loopwright:Team": st.sampled_from(TEAMS)})}
    ),
    st.fixed_dictionaries(
        {
            "StringNotEquals": st.fixed_dictionaries(
                {"loopwright:Team": st.lists(st.sampled_from(TEAMS), min_size=1, max_size=2)}
            )
        }
    ),
    st.fixed_dictionaries(
        {"NumericLessThan": st.fixed_dictionaries({"sessions:GpuCount": st.integers(0, 16)})}
    ),
    st.fixed_dictionaries(
        {"BoolIfExists": st.fixed_dictionaries({"loopwright:Mfa": st.booleans()})}
    ),
    st.fixed_dictionaries(
        {
            "ForAnyValue:StringLike": st.fixed_dictionaries(
                {"loopwright:TagKeys": st.sampled_from(["team*", "env", "*"])}
            )
        }
    ),
    st.fixed_dictionaries(
        {"Null": st.fixed_dictionaries({"loopwright:Team": st.sampled_from(["true", "false"])})}
    ),
)


def one_or_many(values: st.SearchStrategy[str]) -> st.SearchStrategy[str | list[str]]:
    return st.one_of(values, st.lists(values, min_size=1, max_size=3))


@st.composite
def statements(draw: st.DrawFn, effect: st.SearchStrategy[str] | None = None) -> Doc:
    out: Doc = {
        "Effect": draw(effect if effect is not None else st.sampled_from(["Allow", "Deny"]))
    }
    out["NotAction" if draw(st.booleans()) and draw(st.booleans()) else "Action"] = draw(
        one_or_many(action_patterns)
    )
    out["NotResource" if draw(st.booleans()) and draw(st.booleans()) else "Resource"] = draw(
        one_or_many(resource_patterns)
    )
    if draw(st.booleans()):
        out["Condition"] = draw(conditions)
    return out


@st.composite
def documents(draw: st.DrawFn) -> Doc:
    items = draw(st.lists(statements(), min_size=1, max_size=3))
    for index, item in enumerate(items):
        if draw(st.booleans()):
            item["Sid"] = f"S{index}"
    out: Doc = {"Version": draw(st.sampled_from(["2012-10-17", "2008-10-17"]))}
    if draw(st.booleans()):
        out["Id"] = "generated"
    out["Statement"] = items[0] if len(items) == 1 and draw(st.booleans()) else items
    return out


contexts = st.fixed_dictionaries(
    {},
    optional={
        "loopwright:Team": st.sampled_from(TEAMS),
        "sessions:GpuCount": st.integers(0, 16),
        "loopwright:Mfa": st.booleans(),
        "loopwright:TagKeys": st.lists(st.sampled_from(["team", "env", "owner"]), max_size=3),
    },
)


@st.composite
def requests(draw: st.DrawFn) -> AccessRequest:
    action = draw(st.sampled_from(REQUEST_ACTIONS))
    return AccessRequest(action, draw(resources()), "", draw(contexts))


named_policies = st.lists(documents(), max_size=3).map(
    lambda docs: [(f"p{i}", PolicyDocument.parse(d)) for i, d in enumerate(docs)]
)


def with_statement(
    policies: list[tuple[str, PolicyDocument]], statement: Doc, where: int
) -> list[tuple[str, PolicyDocument]]:
    """``policies`` with ``statement`` appended to one of them (or to a new policy)."""
    if not policies or where >= len(policies):
        extra = PolicyDocument.parse({"Version": "2012-10-17", "Statement": [statement]})
        return [*policies, ("extra", extra)]
    name, document = policies[where]
    data = document.to_dict()
    existing = data["Statement"] if isinstance(data["Statement"], list) else [data["Statement"]]
    data["Statement"] = [*existing, statement]
    return [*policies[:where], (name, PolicyDocument.parse(data)), *policies[where + 1 :]]


# -- properties ------------------------------------------------------------------------------


@PROPERTIES
@given(st.data(), named_policies, requests(), st.integers(0, 3))
def test_a_matching_deny_always_wins(
    data: st.DataObject,
    policies: list[tuple[str, PolicyDocument]],
    request: AccessRequest,
    where: int,
) -> None:
    deny: Doc = {
        "Effect": "Deny",
        "Action": data.draw(action_pattern_for(request.action)),
        "Resource": data.draw(resource_pattern_for(request.resource)),
    }
    decision = evaluate(with_statement(policies, deny, where), request)
    assert decision.effect == "ExplicitDeny"
    assert not decision.allowed


@PROPERTIES
@given(named_policies, requests(), statements(effect=st.just("Allow")), st.integers(0, 3))
def test_adding_an_allow_never_takes_access_away(
    policies: list[tuple[str, PolicyDocument]], request: AccessRequest, allow: Doc, where: int
) -> None:
    before = evaluate(policies, request)
    after = evaluate(with_statement(policies, allow, where), request)
    if before.allowed:
        assert after.allowed
    if before.effect == "ExplicitDeny":
        assert after.effect == "ExplicitDeny"


@PROPERTIES
@given(named_policies, requests())
def test_decisions_are_consistent(
    policies: list[tuple[str, PolicyDocument]], request: AccessRequest
) -> None:
    decision = evaluate(policies, request)
    assert decision.allowed == (decision.effect == "Allow")
    assert (decision.policy is None) == (decision.effect == "ImplicitDeny")
    without_denies = [
        (name, doc) for name, doc in policies if all(s.effect == "Allow" for s in doc.statements)
    ]
    assert evaluate(without_denies, request).effect != "ExplicitDeny"


GLOB_PATTERN = st.text(alphabet="aAb.[(\\*?", max_size=8)
GLOB_TEXT = st.text(alphabet="aAb.[(\\", max_size=8)


@PROPERTIES
@given(GLOB_PATTERN, GLOB_TEXT)
def test_glob_agrees_with_the_reference_matcher(pattern: str, text: str) -> None:
    assert glob_match(pattern, text) == reference_match(pattern, text)
    assert glob_match(pattern, text, ignore_case=True) == reference_match(
        pattern.lower(), text.lower()
    )


ARN_PART = st.text(alphabet="ab*?/", max_size=4)


@PROPERTIES
@given(
    st.lists(ARN_PART, min_size=4, max_size=6),
    st.lists(st.text(alphabet="ab/", max_size=4), min_size=4, max_size=6),
)
def test_arn_like_agrees_with_the_reference_matcher(
    pattern_parts: list[str], arn_parts: list[str]
) -> None:
    pattern, arn = ":".join(["arn", *pattern_parts]), ":".join(["arn", *arn_parts])
    assert arn_like(pattern, arn) == reference_arn_like(pattern, arn)


@PROPERTIES
@given(st.text(alphabet="sesionkmFSD*?:", max_size=12))
def test_matching_actions_agrees_with_the_reference_matcher(pattern: str) -> None:
    expected = [name for name in ACTIONS if reference_match(pattern.lower(), name.lower())]
    assert matching_actions(pattern) == expected


@PROPERTIES
@given(documents())
def test_parse_to_dict_round_trip(document: Doc) -> None:
    parsed = PolicyDocument.parse(document)
    assert parsed.to_dict() == document
    assert PolicyDocument.parse(parsed.to_dict()) == parsed
    assert PolicyDocument.parse(parsed.to_json()) == parsed


NEGATIONS = [
    ("StringEquals", "StringNotEquals"),
    ("StringLike", "StringNotLike"),
    ("StringEqualsIgnoreCase", "StringNotEqualsIgnoreCase"),
]


@PROPERTIES
@given(
    st.sampled_from(NEGATIONS),
    st.lists(st.sampled_from(["ml", "ML", "m*", "o?s"]), min_size=1, max_size=3),
    st.sampled_from((*TEAMS, "ML", "m*")),
)
def test_a_negated_operator_is_the_complement_for_a_present_key(
    pair: tuple[str, str], values: list[str], team: str
) -> None:
    def decide(operator: str) -> Decision:
        statement = {
            "Effect": "Allow",
            "Action": "*",
            "Resource": "*",
            "Condition": {operator: {"loopwright:Team": values}},
        }
        policy = PolicyDocument.parse({"Version": "2012-10-17", "Statement": statement})
        return evaluate(
            [("p", policy)], AccessRequest("sessions:Sample", "*", "", {"loopwright:Team": team})
        )

    positive, negated = pair
    assert decide(positive).allowed != decide(negated).allowed
