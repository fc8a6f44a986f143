"""The failures of sampling by model name (a name that is not the caller's, a wait that ran out,
a failed sample operation); ``controlplane.edge`` answers them in each face's shape."""

from __future__ import annotations

from controlplane.errors import DomainError, NotFound


class ModelNotFound(NotFound):
    """The model name is not one of the caller's (missing and another tenant's read the same)."""

    code = "model_not_found"

    def __init__(self, name: str) -> None:
        super().__init__(
            f"The model `{name}` does not exist or you do not have access to it.", field="model"
        )


class Timeout(DomainError):
    """The sample operation did not finish in time; it still runs (and is metered)."""

    status = 504
    code = "timeout"


class OperationFailed(DomainError):
    """The worker refused or failed the sample operation; ``category`` is the operation's."""

    def __init__(self, detail: str, *, category: str) -> None:
        super().__init__(detail)
        self.status = 400 if category == "user" else 500
        self.code = "invalid_request" if category == "user" else "server_error"
