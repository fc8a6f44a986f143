"""Wire types of the Tinker training API: one pydantic model per JSON body.

Requests forbid unknown fields; responses ignore them.
"""

from .catalog import BaseModelInfo, ListBaseModelsResponse, TokenizerFilesResponse
from .checkpoints import (
    Checkpoint,
    CheckpointsListResponse,
    CheckpointType,
    ParsedCheckpointTinkerPath,
)
from .chunks import (
    EncodedTextChunk,
    ImageAssetPointerChunk,
    ImageChunk,
    ImageDimensions,
    ModelInputChunk,
)
from .datum import LOSS_INPUT_DTYPES, Datum, LossFnInputs
from .futures import (
    FutureRetrieveRequest,
    QueueState,
    RequestErrorCategory,
    RequestFailedResponse,
    TryAgainResponse,
    UntypedAPIFuture,
)
from .lora import LoraConfig
from .losses import (
    STABLE_REINFORCE_CONFIG,
    UNSUPPORTED_LOSSES,
    ForwardBackwardInput,
    ForwardBackwardOutput,
    LossFnOutput,
    LossFnType,
    stable_reinforce_config_problem,
)
from .model_input import ModelInput
from .models import (
    CreateModelRequest,
    CreateModelResponse,
    GetInfoRequest,
    GetInfoResponse,
    ModelData,
    UnloadModelRequest,
    UnloadModelResponse,
)
from .optim import (
    SUPPORTED_OPTIMIZERS,
    AdamOptimizerConfig,
    AdamParams,
    DimuonOptimizerConfig,
    DimuonParams,
    OptimizerConfig,
    OptimParams,
    OptimStepRequest,
    OptimStepResponse,
    params_family,
    unsupported_optimizer,
)
from .pagination import Cursor
from .provenance import (
    PromptProvenanceSpan,
    ProvenanceSpan,
    ProvenanceSpans,
    SampledProvenanceSpan,
)
from .queue import QueueStatus, WaitsFor
from .sampling import (
    PromptAltTokens,
    SampledSequence,
    SampleRequest,
    SampleResponse,
    SamplingParams,
    StopReason,
)
from .sampling_sessions import (
    CreateSamplingSessionRequest,
    CreateSamplingSessionResponse,
    GetSamplerResponse,
)
from .server import (
    ClientConfigRequest,
    ClientConfigResponse,
    ClientDynamicConfigResponse,
    GetServerCapabilitiesResponse,
    HealthResponse,
    SupportedModel,
)
from .session_info import ErrorBody, ListSessionInfosResponse, SessionInfo, SessionState
from .sessions import (
    CreateSessionRequest,
    CreateSessionResponse,
    GetSessionResponse,
    ListSessionsResponse,
    SessionHeartbeatRequest,
    SessionHeartbeatResponse,
)
from .tensor_data import TensorData, TensorDtype
from .training import ForwardBackwardRequest, ForwardRequest
from .training_runs import TrainingRun, TrainingRunsResponse
from .uploads import (
    ExternalWeightsUploadFinishRequest,
    ExternalWeightsUploadFinishResponse,
    ExternalWeightsUploadStartRequest,
    ExternalWeightsUploadStartResponse,
)
from .vpc import VpcConfig
from .weights import (
    CopyWeightsRequest,
    CopyWeightsResponse,
    LoadWeightsRequest,
    LoadWeightsResponse,
    SaveWeightsExternalRequest,
    SaveWeightsForSamplerRequest,
    SaveWeightsForSamplerResponse,
    SaveWeightsForSamplerResponseInternal,
    SaveWeightsRequest,
    SaveWeightsResponse,
    WeightsInfoRequest,
    WeightsInfoResponse,
)

__all__ = [
    "LOSS_INPUT_DTYPES",
    "STABLE_REINFORCE_CONFIG",
    "SUPPORTED_OPTIMIZERS",
    "UNSUPPORTED_LOSSES",
    "AdamOptimizerConfig",
    "AdamParams",
    "BaseModelInfo",
    "Checkpoint",
    "CheckpointType",
    "CheckpointsListResponse",
    "ClientConfigRequest",
    "ClientConfigResponse",
    "ClientDynamicConfigResponse",
    "CopyWeightsRequest",
    "CopyWeightsResponse",
    "CreateModelRequest",
    "CreateModelResponse",
    "CreateSamplingSessionRequest",
    "CreateSamplingSessionResponse",
    "CreateSessionRequest",
    "CreateSessionResponse",
    "Cursor",
    "Datum",
    "DimuonOptimizerConfig",
    "DimuonParams",
    "EncodedTextChunk",
    "ErrorBody",
    "ExternalWeightsUploadFinishRequest",
    "ExternalWeightsUploadFinishResponse",
    "ExternalWeightsUploadStartRequest",
    "ExternalWeightsUploadStartResponse",
    "ForwardBackwardInput",
    "ForwardBackwardOutput",
    "ForwardBackwardRequest",
    "ForwardRequest",
    "FutureRetrieveRequest",
    "GetInfoRequest",
    "GetInfoResponse",
    "GetSamplerResponse",
    "GetServerCapabilitiesResponse",
    "GetSessionResponse",
    "HealthResponse",
    "ImageAssetPointerChunk",
    "ImageChunk",
    "ImageDimensions",
    "ListBaseModelsResponse",
    "ListSessionInfosResponse",
    "ListSessionsResponse",
    "LoadWeightsRequest",
    "LoadWeightsResponse",
    "LoraConfig",
    "LossFnInputs",
    "LossFnOutput",
    "LossFnType",
    "ModelData",
    "ModelInput",
    "ModelInputChunk",
    "OptimParams",
    "OptimStepRequest",
    "OptimStepResponse",
    "OptimizerConfig",
    "ParsedCheckpointTinkerPath",
    "PromptAltTokens",
    "PromptProvenanceSpan",
    "ProvenanceSpan",
    "ProvenanceSpans",
    "QueueState",
    "QueueStatus",
    "RequestErrorCategory",
    "RequestFailedResponse",
    "SampleRequest",
    "SampleResponse",
    "SampledProvenanceSpan",
    "SampledSequence",
    "SamplingParams",
    "SaveWeightsExternalRequest",
    "SaveWeightsForSamplerRequest",
    "SaveWeightsForSamplerResponse",
    "SaveWeightsForSamplerResponseInternal",
    "SaveWeightsRequest",
    "SaveWeightsResponse",
    "SessionHeartbeatRequest",
    "SessionHeartbeatResponse",
    "SessionInfo",
    "SessionState",
    "StopReason",
    "SupportedModel",
    "TensorData",
    "TensorDtype",
    "TokenizerFilesResponse",
    "TrainingRun",
    "TrainingRunsResponse",
    "TryAgainResponse",
    "UnloadModelRequest",
    "UnloadModelResponse",
    "UntypedAPIFuture",
    "VpcConfig",
    "WaitsFor",
    "WeightsInfoRequest",
    "WeightsInfoResponse",
    "params_family",
    "stable_reinforce_config_problem",
    "unsupported_optimizer",
]
