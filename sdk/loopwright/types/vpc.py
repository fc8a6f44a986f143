"""Network placement of a session: the VPC subnets and security groups its work must run in."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from ._base import RequestModel

__all__ = [
    "MAX_SECURITY_GROUPS",
    "MAX_SUBNETS",
    "SECURITY_GROUP_ID_PATTERN",
    "SUBNET_ID_PATTERN",
    "VpcConfig",
]

SUBNET_ID_PATTERN = re.compile(r"subnet-[0-9a-f]{8,17}")
SECURITY_GROUP_ID_PATTERN = re.compile(r"sg-[0-9a-f]{8,17}")
MAX_SUBNETS = 16
MAX_SECURITY_GROUPS = 5


def _id_check(what: str, pattern: re.Pattern[str], prefix: str) -> AfterValidator:
    def check(value: str) -> str:
        if not pattern.fullmatch(value):
            raise PydanticCustomError(
                "id_format",
                f"'{{value}}' is not a {what} id: '{prefix}' then 8 to 17 lowercase hex digits",
                {"value": value},
            )
        return value

    return AfterValidator(check)


SubnetId = Annotated[str, _id_check("subnet", SUBNET_ID_PATTERN, "subnet-")]
SecurityGroupId = Annotated[str, _id_check("security group", SECURITY_GROUP_ID_PATTERN, "sg-")]

_LIMITS = {
    "subnets": ("subnet", MAX_SUBNETS),
    "security_group_ids": ("security group", MAX_SECURITY_GROUPS),
}


class VpcConfig(RequestModel):
    """Where a session's work may run, as in SageMaker: on a worker that reaches at least one of
    ``subnets`` and offers every one of ``security_group_ids`` (Loopwright extension)."""

    subnets: list[SubnetId]
    """1 to 16 subnet ids (``subnet-`` then 8 to 17 lowercase hex digits), each once."""

    security_group_ids: list[SecurityGroupId]
    """1 to 5 security group ids (``sg-`` then 8 to 17 lowercase hex digits), each once."""

    @field_validator("subnets", "security_group_ids")
    @classmethod
    def _count_and_repeats(cls, ids: list[str], info: ValidationInfo) -> list[str]:
        what, limit = _LIMITS[info.field_name or ""]
        if not 1 <= len(ids) <= limit:
            raise PydanticCustomError(
                "id_count", f"must hold 1 to {limit} {what} ids, got {len(ids)}", {}
            )
        first: dict[str, int] = {}
        for i, value in enumerate(ids):
            if value in first:
                raise PydanticCustomError(
                    "id_repeated",
                    f"'{{value}}' is listed twice, at [{first[value]}] and [{i}]",
                    {"value": value},
                )
            first[value] = i
        return ids
