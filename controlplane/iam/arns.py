"""Loopwright resource names: ``arn:loopwright:<service>:<region>:<account>:<type>/<id>``.

The region is always empty in this product; the account is a tenant's 12-digit account id.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .globs import glob_match, has_wildcard

PARTITION = "loopwright"
ARN_FORMAT = "arn:loopwright:<service>:<region>:<account>:<type>/<id>"

_ACCOUNT = re.compile(r"[0-9]{12}")
_SERVICE = re.compile(r"[a-z][a-z0-9-]*")
_RESOURCE_TYPE = re.compile(r"[a-z][a-z0-9-]*")
_ACCOUNT_PATTERN = re.compile(r"[0-9*?]+")


class ArnError(ValueError):
    """A string that is not a valid Loopwright ARN (or ARN pattern)."""


def is_account_id(value: object) -> bool:
    """Whether ``value`` is a 12-digit account id."""
    return isinstance(value, str) and _ACCOUNT.fullmatch(value) is not None


def _has_control_characters(text: str) -> bool:
    return any(ord(char) < 32 or ord(char) == 127 for char in text)


@dataclass(frozen=True)
class Arn:
    """A parsed, valid ARN of a concrete resource (no wildcards)."""

    service: str
    account: str
    resource_type: str
    resource_id: str
    region: str = ""

    def __post_init__(self) -> None:
        if not _SERVICE.fullmatch(self.service):
            raise ArnError(
                f"invalid service {self.service!r}: use lowercase letters, digits and '-'"
            )
        if self.region:
            raise ArnError(f"region must be empty in Loopwright ARNs, got {self.region!r}")
        if not is_account_id(self.account):
            raise ArnError(f"account must be a 12-digit account id, got {self.account!r}")
        if not _RESOURCE_TYPE.fullmatch(self.resource_type):
            raise ArnError(
                f"invalid resource type {self.resource_type!r}: "
                "use lowercase letters, digits and '-'"
            )
        if not self.resource_id:
            raise ArnError("resource id must not be empty")
        if _has_control_characters(self.resource_id):
            raise ArnError("resource id must not contain control characters")

    @property
    def resource(self) -> str:
        """The resource part, ``<type>/<id>``."""
        return f"{self.resource_type}/{self.resource_id}"

    def __str__(self) -> str:
        return f"arn:{PARTITION}:{self.service}:{self.region}:{self.account}:{self.resource}"

    @classmethod
    def parse(cls, text: str) -> Arn:
        """Parse ``text``; raises ``ArnError`` saying which part is wrong."""
        parts = split_arn(text)
        partition, service, region, account, resource = parts[1:]
        if partition != PARTITION:
            raise ArnError(f"unknown partition {partition!r} (expected {PARTITION!r})")
        resource_type, slash, resource_id = resource.partition("/")
        if not slash:
            raise ArnError(f"resource must be '<type>/<id>', got {resource!r}")
        return cls(service, account, resource_type, resource_id, region)


def split_arn(text: str) -> list[str]:
    """The six colon-separated parts of an ARN or ARN pattern (the resource may contain ':')."""
    if not isinstance(text, str):
        raise ArnError(f"ARN must be a string, got {type(text).__name__}")
    if not text.startswith("arn:"):
        raise ArnError(f"ARN must start with 'arn:', got {text!r}")
    parts = text.split(":", 5)
    if len(parts) != 6:
        raise ArnError(f"ARN must have six colon-separated parts ({ARN_FORMAT}), got {text!r}")
    return parts


def build_arn(service: str, account: str, resource_type: str, resource_id: str) -> str:
    """The ARN of one resource, validated."""
    return str(Arn(service, account, resource_type, resource_id))


def check_arn_pattern(pattern: str) -> None:
    """Validate an ARN pattern (``*`` and ``?`` allowed in every part); raises ``ArnError``."""
    if pattern == "*":
        return
    _, partition, _service, region, account, resource = split_arn(pattern)
    if not glob_match(partition, PARTITION):
        raise ArnError(f"unknown partition {partition!r} (expected {PARTITION!r})")
    if region.strip("*"):
        raise ArnError(f"region must be empty in Loopwright ARNs, got {region!r}")
    if not (
        is_account_id(account) or (has_wildcard(account) and _ACCOUNT_PATTERN.fullmatch(account))
    ):
        raise ArnError(f"account must be a 12-digit account id or a pattern, got {account!r}")
    if not resource:
        raise ArnError("resource part must not be empty")
    if _has_control_characters(pattern):
        raise ArnError("ARN must not contain control characters")


def arn_like(pattern: str, arn: str) -> bool:
    """AWS ``ArnLike`` matching: each of the six parts is globbed separately, case-sensitively."""
    if pattern == "*":
        return True
    pattern_parts = pattern.split(":", 5)
    arn_parts = arn.split(":", 5)
    if len(pattern_parts) != 6 or len(arn_parts) != 6:
        return False
    return all(glob_match(p, a) for p, a in zip(pattern_parts, arn_parts, strict=True))
