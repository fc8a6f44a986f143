"""The runtime's request bodies as its service model defines them (``sagemakertrainingsessionruntime``
2025-02-10): the wire names, which members are required, each bound the model states, and
"exactly one member" of each union. A body outside them is a ``ValidationException`` naming the
member; ``tests/sagemaker/test_runtime_shapes.py`` holds these bounds to the model's own.

Where the service takes less than the model allows, ``limits`` says so in a second check."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from loopwright.types.limits import INT32_MAX, Int64, TokenId

NAME_PATTERN = r"^[a-zA-Z0-9-]+$"
Int32 = Annotated[int, Field(ge=-(2**31), le=INT32_MAX)]
ModelPackageArn = Annotated[str, Field(min_length=1, max_length=2048)]
Description = Annotated[str, Field(max_length=1024)]
ClientToken = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=NAME_PATTERN)]
LOSS_NAMES = ("cross_entropy", "importance_sampling", "ppo", "cispo")


class Shape(BaseModel):
    """A structure of the model: an unknown member is refused, so a typo surfaces at once."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Union(Shape):
    """A union of the model: exactly one member is set."""

    @model_validator(mode="after")
    def _one_member(self) -> Union:
        chosen = [name for name in type(self).model_fields if getattr(self, name) is not None]
        if len(chosen) != 1:
            members = ", ".join(type(self).model_fields)
            raise ValueError(f"exactly one member must be set ({members}); got {len(chosen)}")
        return self

    @property
    def member(self) -> tuple[str, Any]:
        """The member that is set, and its value."""
        name = next(n for n in type(self).model_fields if getattr(self, n) is not None)
        return name, getattr(self, name)


# -- model inputs --------------------------------------------------------------------------------
class EncodedTextChunk(Shape):
    tokens: list[TokenId]
    type: Literal["encoded_text"]


class ModelInput(Shape):
    chunks: list[EncodedTextChunk]


class TensorData(Shape):
    # a Document in the model: here a flat list of numbers, laid out by ``shape``
    data: list[Int64 | float]
    dtype: Annotated[str, Field(max_length=32)]
    shape: (
        Annotated[list[Annotated[int, Field(ge=0, le=INT32_MAX)]], Field(max_length=8)] | None
    ) = None


class Datum(Shape):
    modelInput: ModelInput
    lossFnInputs: dict[Annotated[str, Field(max_length=64)], TensorData] | None = None


class PassConfig(Shape):
    """``ForwardConfig`` and ``ForwardBackwardConfig``: the same members."""

    lossFnName: Literal["cross_entropy", "importance_sampling", "ppo", "cispo"]
    datumList: list[Datum]
    lossFnConfig: dict[str, Any] | None = None  # a Document: its keys are checked in ``limits``


class AdamParamsConfig(Shape):
    learningRate: Annotated[float, Field(ge=0, le=0.01)]
    beta1: Annotated[float, Field(ge=0, le=0.999999)] | None = None
    beta2: Annotated[float, Field(ge=0, le=0.999999)] | None = None
    eps: Annotated[float, Field(ge=1e-16, le=0.01)] | None = None
    weightDecay: Annotated[float, Field(ge=0, le=1)] | None = None
    gradClipNorm: Annotated[float, Field(ge=0, le=100)] | None = None
    loraPlusLrRatio: Annotated[float, Field(ge=1, le=100)] | None = None


class OptimizerStepConfig(Shape):
    adamParamsConfig: AdamParamsConfig


class SaveWeightsConfig(Shape):
    mergeWeights: bool | None = None
    description: Description | None = None


class SaveStateConfig(Shape):
    description: Description | None = None


class LoadStateConfig(Shape):
    modelPackageArn: ModelPackageArn
    loadOptimizer: bool


class OperationConfig(Union):
    forward: PassConfig | None = None
    forwardBackward: PassConfig | None = None
    optimizerStep: OptimizerStepConfig | None = None
    saveWeights: SaveWeightsConfig | None = None
    saveState: SaveStateConfig | None = None
    loadState: LoadStateConfig | None = None


class ExecuteTrainingOperation(Shape):
    sequenceNumber: Annotated[int, Field(ge=1, le=INT32_MAX)]
    clientToken: ClientToken | None = None
    operationConfig: OperationConfig


# -- sampling ------------------------------------------------------------------------------------
class SamplingParams(Shape):
    maxTokens: Annotated[int, Field(ge=512, le=131072)]
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    topK: Int32 | None = None
    topP: Annotated[float, Field(ge=0, le=1)] | None = None
    seed: Int32 | None = None
    stop: list[str] | None = None


class SampleConfig(Shape):
    prompt: ModelInput
    numSamples: Annotated[int, Field(ge=1, le=1000)]
    samplingParams: SamplingParams
    includePromptLogprobs: bool | None = None
    topkPromptLogprobs: Int32 | None = None
    modelPackageArn: ModelPackageArn | None = None


class ComputeLogprobsConfig(Shape):
    prompt: ModelInput
    modelPackageArn: ModelPackageArn | None = None


class LoadWeightsForSamplingConfig(Shape):
    modelPackageArn: ModelPackageArn


class SampleOperationConfig(Union):
    sample: SampleConfig | None = None
    computeLogprobs: ComputeLogprobsConfig | None = None
    loadWeightsForSampling: LoadWeightsForSamplingConfig | None = None


class ExecuteSamplingOperation(Shape):
    operationConfig: SampleOperationConfig
