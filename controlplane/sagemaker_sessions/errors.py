"""Refusals both SageMaker faces answer with a name of the service model's own."""

from __future__ import annotations

from controlplane.errors import Conflict, DomainError


class NameInUse(Conflict):
    """A training session (or a model package group) by that name exists: ``ResourceInUse``."""


class InvalidTransition(DomainError):
    """What the session's status does not allow (stop a stopped one, delete a running one): a
    ``ValidationException`` in the words the SDK reads, "invalid session state transition from
    <status> to <status>"."""
