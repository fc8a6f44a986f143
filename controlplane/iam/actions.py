"""The documented action catalogue: every ``service:Action`` a policy may name, and its resource."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from .globs import glob_match

ANY_RESOURCE = "*"


@dataclass(frozen=True)
class ActionSpec:
    """One action: ``name`` is ``service:Action``; ``resource_type`` is an ARN type or ``*``."""

    name: str
    description: str
    resource_type: str

    @property
    def service(self) -> str:
        return self.name.partition(":")[0]


# (action, resource type, description). Actions on a concrete resource name its ARN type; list
# and account-wide actions take "*". Create* actions apply to the ARN of the resource created.
_CATALOGUE: dict[str, list[tuple[str, str, str]]] = {
    "sessions": [
        ("CreateTrainingSession", "session", "Start a training session"),
        ("DescribeTrainingSession", "session", "Read a training session's state"),
        ("ListTrainingSessions", "*", "List the account's training sessions"),
        ("StopTrainingSession", "session", "Stop a training session and free its workers"),
        (
            "DeleteTrainingSession",
            "session",
            "Delete an ended training session from the SageMaker API (its checkpoints stay)",
        ),
        ("CreateModel", "model", "Create a LoRA training model in a session"),
        ("GetModelInfo", "model", "Read a model's configuration"),
        ("UnloadModel", "model", "Unload a model from its workers"),
        ("Forward", "model", "Run a forward pass"),
        ("ForwardBackward", "model", "Run a forward and backward pass"),
        ("OptimStep", "model", "Apply an optimizer step"),
        ("SaveWeights", "model", "Save a training checkpoint"),
        ("SaveWeightsForSampler", "model", "Save weights for sampling"),
        ("LoadWeights", "model", "Load weights from a checkpoint into a model"),
        ("CreateSamplingSession", "sampler", "Create a sampler on saved weights"),
        ("Sample", "sampler", "Generate tokens with a sampler"),
        ("RetrieveFuture", "session", "Fetch the result of a queued request of a session"),
        ("ListCheckpoints", "session", "List a training session's checkpoints"),
        ("DeleteCheckpoint", "checkpoint", "Delete a checkpoint"),
        (
            "GetCheckpointDownloadLinks",
            "checkpoint",
            "Make time-limited download links to a checkpoint's files",
        ),
        ("CopyCheckpoint", "checkpoint", "Copy a checkpoint into a session or the account"),
        ("SetCheckpointTtl", "checkpoint", "Set or remove a checkpoint's expiry (TTL)"),
        (
            "UploadExternalWeights",
            "checkpoint",
            "Upload weights trained elsewhere as a sampler checkpoint of the account",
        ),
        ("ListBaseModels", "*", "List the base models that can be trained"),
        ("CreateChatCompletion", "checkpoint", "Chat completion on a checkpoint's sampler weights"),
    ],
    "registry": [
        ("CreateModelPackageGroup", "model-package-group", "Create a model package group"),
        ("DescribeModelPackageGroup", "model-package-group", "Read a model package group"),
        ("ListModelPackageGroups", "*", "List the account's model package groups"),
        ("DeleteModelPackageGroup", "model-package-group", "Delete a model package group"),
        ("CreateModelPackage", "model-package", "Register a model package version"),
        ("DescribeModelPackage", "model-package", "Read a model package"),
        ("ListModelPackages", "model-package-group", "List the packages of a group"),
        ("UpdateModelPackageApproval", "model-package", "Approve or reject a model package"),
        ("DeleteModelPackage", "model-package", "Delete a model package"),
        ("DownloadModelPackage", "model-package", "Download a model package's weights"),
        ("GetRetentionRule", "model-package-group", "Read a group's checkpoint retention rule"),
        (
            "PutRetentionRule",
            "model-package-group",
            "Set a group's checkpoint retention rule (keep the last N, keep approved versions)",
        ),
        ("DeleteRetentionRule", "model-package-group", "Remove a group's retention rule"),
    ],
    "billing": [
        ("GetUsageReport", "*", "Read the account's usage report"),
        ("GetInvoices", "*", "Read the account's invoices"),
        ("ManageBilling", "*", "Change payment methods and plans"),
        ("CreateBudget", "budget", "Create a budget (a spend cap with alerts)"),
        ("DescribeBudget", "budget", "Read a budget, its spend and its alerts"),
        ("ListBudgets", "*", "List the account's budgets"),
        ("UpdateBudget", "budget", "Change a budget's limit, thresholds or webhook"),
        ("DeleteBudget", "budget", "Delete a budget"),
    ],
    "iam": [
        ("CreateRole", "role", "Create a role"),
        ("GetRole", "role", "Read a role"),
        ("ListRoles", "*", "List the account's roles"),
        ("DeleteRole", "role", "Delete a role"),
        ("UpdateAssumeRolePolicy", "role", "Replace a role's trust policy"),
        ("PutRolePolicy", "role", "Add or replace an inline policy of a role"),
        ("GetRolePolicy", "role", "Read an inline policy of a role"),
        ("ListRolePolicies", "role", "List the inline policies of a role"),
        ("DeleteRolePolicy", "role", "Delete an inline policy of a role"),
        ("PassRole", "role", "Hand a role to a service that acts with it"),
        ("CreateUser", "user", "Invite a user into the account"),
        ("GetUser", "user", "Read a user's membership"),
        ("ListUsers", "*", "List the account's users"),
        ("UpdateUser", "user", "Change a user's membership role"),
        ("DeleteUser", "user", "Remove a user from the account (their keys are revoked)"),
        ("PutUserPolicy", "user", "Add or replace an inline policy of a user"),
        ("GetUserPolicy", "user", "Read an inline policy of a user"),
        ("ListUserPolicies", "user", "List the inline policies of a user"),
        ("DeleteUserPolicy", "user", "Delete an inline policy of a user"),
        (
            "CreateApiKey",
            "user",
            "Create an API key for a user (or, on a role's ARN, for the role)",
        ),
        ("ListApiKeys", "user", "List a user's API keys (or, on a role's ARN, the role's)"),
        ("RevokeApiKey", "api-key", "Revoke an API key"),
        (
            "CreateAccessKey",
            "user",
            "Create an access key pair (SigV4) for a user (or, on a role's ARN, for the role)",
        ),
        (
            "ListAccessKeys",
            "user",
            "List a user's access keys (or, on a role's ARN, the role's)",
        ),
        ("RevokeAccessKey", "access-key", "Revoke an access key pair"),
    ],
    "kms": [
        ("CreateKey", "*", "Create a customer-managed key"),
        ("DescribeKey", "key", "Read a key's metadata"),
        ("ListKeys", "*", "List the account's keys"),
        ("EnableKey", "key", "Enable a key"),
        ("DisableKey", "key", "Disable a key"),
        ("ScheduleKeyDeletion", "key", "Schedule a key for deletion"),
        ("CancelKeyDeletion", "key", "Cancel a scheduled key deletion"),
        ("RotateKey", "key", "Rotate a key's material"),
        ("Encrypt", "key", "Encrypt data with a key"),
        ("Decrypt", "key", "Decrypt data with a key"),
        ("GenerateDataKey", "key", "Generate a data key under a key"),
    ],
    "audit": [
        ("LookupEvents", "*", "Search the account's audit trail"),
    ],
    "vpc": [
        ("ListSubnets", "*", "List the subnets registered to the account"),
    ],
    "storage": [
        ("ListLocations", "*", "List the S3 locations the account's sessions may write to"),
    ],
    "sts": [
        ("AssumeRole", "role", "Obtain credentials of a role (checked against its trust policy)"),
    ],
}

SERVICES: tuple[str, ...] = tuple(_CATALOGUE)

ACTIONS: Mapping[str, ActionSpec] = MappingProxyType(
    {
        f"{service}:{action}": ActionSpec(f"{service}:{action}", description, resource_type)
        for service, entries in _CATALOGUE.items()
        for action, resource_type, description in entries
    }
)

# Resource types by the service that appears in their ARNs (sts:AssumeRole acts on iam roles).
RESOURCE_TYPES: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        "sessions": frozenset({"session", "model", "sampler", "checkpoint"}),
        "registry": frozenset({"model-package-group", "model-package"}),
        "billing": frozenset({"budget"}),
        "iam": frozenset({"role", "user", "api-key", "access-key"}),
        "kms": frozenset({"key"}),
    }
)

_BY_LOWER_NAME: Mapping[str, str] = {name.lower(): name for name in ACTIONS}


class UnknownActionError(LookupError):
    """An action name that is not in the catalogue."""


def is_known_service(prefix: str) -> bool:
    """Whether ``prefix`` (any case) is a service of the catalogue."""
    return prefix.lower() in SERVICES


def resolve_action(name: str) -> str:
    """The canonical spelling of ``name`` (looked up case-insensitively)."""
    try:
        return _BY_LOWER_NAME[name.lower()]
    except KeyError:
        raise UnknownActionError(f"unknown action {name!r}") from None


def matching_actions(pattern: str) -> list[str]:
    """Canonical names of the actions ``pattern`` matches (case-insensitive ``*``/``?``)."""
    return [name for name in ACTIONS if glob_match(pattern, name, ignore_case=True)]
