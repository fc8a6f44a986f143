"""Server-level answers: health, supported models, and client feature flags."""

from __future__ import annotations

from typing import Literal

from ._base import RequestModel, ResponseModel

__all__ = [
    "ClientConfigRequest",
    "ClientConfigResponse",
    "ClientDynamicConfigResponse",
    "GetServerCapabilitiesResponse",
    "HealthResponse",
    "SupportedModel",
]


class HealthResponse(ResponseModel):
    """The server is up."""

    status: Literal["ok"]
    """Always "ok"."""


class SupportedModel(ResponseModel):
    """A base model the server can train and sample."""

    model_name: str | None = None
    """Name to pass as base_model."""

    max_context_length: int | None = None
    """Longest sequence, in tokens, the model accepts."""

    trainable: bool | None = None
    """Whether training models can be created on it now (a live worker has room for them)."""

    sampleable: bool | None = None
    """Whether it can be sampled now (a live worker takes samplers of it)."""


class GetServerCapabilitiesResponse(ResponseModel):
    """What the server offers."""

    supported_models: list[SupportedModel]
    """The base models available."""


class ClientConfigRequest(RequestModel):
    """Ask for the feature flags that apply to this client."""

    sdk_version: str
    """Version of the calling SDK."""


class ClientConfigResponse(ResponseModel):
    """Feature flags for the client; a client ignores flags it does not know.

    Defaults are the official SDK's, except use_pyqwest_transport: Loopwright answers false,
    so clients use httpx's default transport.
    """

    pjwt_auth_enabled: bool = False
    """Whether the client should trade its API key for a JWT."""

    credential_default_source: str = "api_key"
    """Where the client takes credentials from by default."""

    sample_dispatch_bytes_semaphore_size: int = 10 * 1024 * 1024
    """Bytes of sample requests a client may have in flight."""

    inflight_response_bytes_semaphore_size: int = 50 * 1024 * 1024
    """Bytes of responses a client may be reading at once."""

    parallel_fwdbwd_chunks: bool = True
    """Whether the chunks of one forward_backward are sent concurrently."""

    proto_write_fwdbwd: bool = False
    """Whether SDK 0.18–0.24 send forward_backward as protobuf instead of JSON (Loopwright:
    false, so those SDKs keep the JSON they always sent)."""

    proto_compress_fwdbwd: bool = False
    """Whether a protobuf forward_backward body is zstd-compressed. A server that sets it takes
    protobuf forward_backward bodies (SDK ≥ 0.25 send nothing else)."""

    fwd_via_fwdbwd: bool = False
    """Whether forward goes through forward_backward with ``forward_only`` (protobuf only)."""

    fwdbwd_max_chunk_len: int = 1024
    """Most datums in one forward_backward request (SDK ≥ 0.25)."""

    fwdbwd_max_chunk_bytes_count: int = 5_000_000
    """Most estimated protobuf bytes (before zstd) in one forward_backward request."""

    fwdbwd_dispatch_bytes_semaphore_size: int = 50_000_000
    """Estimated forward_backward bytes a client may be sending at once."""

    sample_use_retrieve_futures: bool = False
    """Whether samplers poll ``retrieve_futures`` for a whole session (Loopwright: false)."""

    custom_loss_server_side: bool = False
    """Whether custom losses run on the server (Loopwright: false; they run in the client)."""

    sample_join_sampling_session: bool = False
    """Whether a copied sampling client asks ``join_sampling_session`` for its id (false)."""

    billing_exception_max_pause_duration_sec: int = 60 * 60
    """Longest a client waits out a billing pause, in seconds."""

    sample_no_retries: bool = False
    """Whether sample requests are never retried."""

    sample_enable_stuck_detection: bool = True
    """Whether sampling fails when no progress is made for a while."""

    sample_max_concurrent_requests: int = 2000
    """Most sample requests one sampling client keeps in flight."""

    use_pyqwest_transport: bool = False
    """Whether the client uses the pyqwest HTTP transport (Loopwright: false)."""

    create_model_via_load_weights: bool = False
    """Whether loading a checkpoint creates the model in one load_weights call."""


class ClientDynamicConfigResponse(ResponseModel):
    """Flags a live client re-fetches now and then (tinker SDK ≥ 0.25)."""

    refresh_interval_sec: int = 300
    """How often the client asks again, in seconds."""

    sample_cancel_enabled: bool = False
    """Whether an abandoned sample is cancelled on the server (Loopwright: false)."""

    sample_cancel_max_batch_size: int = 64
    """Most cancellations a client sends at once."""
