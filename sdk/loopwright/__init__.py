"""Loopwright SDK: a client for the Tinker training API, served by Loopwright or compatible hosts.

``ServiceClient`` is the entry point; ``loopwright.types`` holds the wire types (re-exported here).
"""

from loopwright import types
from loopwright._http import RetryPolicy
from loopwright.errors import (
    APIConnectionError,
    APIError,
    APIResponseValidationError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    GoneError,
    InternalServerError,
    LoopwrightError,
    ModelLostError,
    NotFoundError,
    PayloadTooLargeError,
    PaymentRequiredError,
    PermissionDeniedError,
    QueueTimeoutError,
    RateLimitError,
    RequestFailedError,
    UnprocessableEntityError,
)
from loopwright.futures import APIFuture, CombinedAPIFuture
from loopwright.sampling_client import SamplingClient
from loopwright.service_client import ServiceClient
from loopwright.training_client import TrainingClient
from loopwright.types import *  # noqa: F403

__version__ = "0.1.0"

__all__ = [
    "APIConnectionError",
    "APIError",
    "APIFuture",
    "APIResponseValidationError",
    "APIStatusError",
    "APITimeoutError",
    "AuthenticationError",
    "BadRequestError",
    "CombinedAPIFuture",
    "ConflictError",
    "GoneError",
    "InternalServerError",
    "LoopwrightError",
    "ModelLostError",
    "NotFoundError",
    "PayloadTooLargeError",
    "PaymentRequiredError",
    "PermissionDeniedError",
    "QueueTimeoutError",
    "RateLimitError",
    "RequestFailedError",
    "RetryPolicy",
    "SamplingClient",
    "ServiceClient",
    "TrainingClient",
    "UnprocessableEntityError",
    "__version__",
    "types",
]
__all__ += types.__all__
