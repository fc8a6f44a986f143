"""Which model package group of the registry a session's saves are registered into: the group its
``model_package_group_arn`` names (checked when the session is created), else the training run's
own ``run-<model id>``; and the rule every group name follows. Sessions need these before the
registry (which keeps the groups and versions, above them) is involved, so they live here."""

from __future__ import annotations

import re

from controlplane.errors import DomainError, NotFound
from controlplane.iam.arns import Arn, ArnError
from controlplane.iam.resources import model_package_group_arn
from controlplane.tenants.models import Tenant

from .models import TrainingModel

NAME_MAX = 63
NAME_RE = re.compile(r"[A-Za-z0-9](-*[A-Za-z0-9]){0,62}")
NAME_RULE = (
    "1–63 letters, digits and hyphens, starting and ending with a letter or digit "
    "([A-Za-z0-9](-*[A-Za-z0-9]){0,62})"
)
GROUP_ARN_FORMAT = "arn:loopwright:registry::<account>:model-package-group/<name>"


def valid_group_name(name: object) -> bool:
    return isinstance(name, str) and len(name) <= NAME_MAX and NAME_RE.fullmatch(name) is not None


def default_group_name(model_id: str) -> str:
    """The group of a training run whose session names none: ``run-<model id>``."""
    name = re.sub(r"[^A-Za-z0-9]+", "-", f"run-{model_id}").strip("-")[:NAME_MAX].rstrip("-")
    return name or "run"


def save_group_name(platform: dict, model_id: str) -> str:
    """The group a model's saves are registered into: the session's, else the run's own."""
    arn = (platform or {}).get("model_package_group_arn")
    try:
        parsed = Arn.parse(arn) if isinstance(arn, str) and arn else None
    except ArnError:  # checked when the session was created; older sessions were not
        parsed = None
    if parsed is not None and valid_group_name(parsed.resource_id):
        return parsed.resource_id
    return default_group_name(model_id)


def save_group_arn(model: TrainingModel) -> str:
    return model_package_group_arn(model.tenant, save_group_name(model.session.platform, model.id))


def session_group_checked(
    *, tenant: Tenant, arn: object, field: str = "model_package_group_arn"
) -> str:
    """A session's group ARN, as stored: a registry group of the caller's own account (400 if
    it is no such ARN, 404 if it names another account). The group is made on first use."""
    if not isinstance(arn, str) or len(arn) > 300:
        raise DomainError(f"{field}: an ARN of at most 300 characters", field=field)
    try:
        parsed = Arn.parse(arn)
    except ArnError as exc:
        raise DomainError(f"{field}: {exc} (expected {GROUP_ARN_FORMAT})", field=field) from None
    if parsed.service != "registry" or parsed.resource_type != "model-package-group":
        raise DomainError(
            f"{field}: not a model package group ARN (expected {GROUP_ARN_FORMAT})", field=field
        )
    if not valid_group_name(parsed.resource_id):
        raise DomainError(f"{field}: the group name must be {NAME_RULE}", field=field)
    if parsed.account != tenant.account_id:
        raise NotFound(f"{field}: no model package group {arn!r} in this account", field=field)
    return str(parsed)
