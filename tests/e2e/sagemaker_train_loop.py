"""sagemaker-train's own loop (its package docstring's example: create, forward_backward,
optim_step, save, sample) against a live server, in a process of its own.

Run as ``python sagemaker_train_loop.py ROLE_ARN`` by the interpreter of ``.venv-sagemaker``
(sagemaker-train 1.27.0), with nothing but the environment pointing it here:
``SAGEMAKER_TRAINING_SESSION_ENDPOINT``, ``SAGEMAKER_TRAINING_SESSION_RUNTIME_ENDPOINT``,
``AWS_ENDPOINT_URL_SAGEMAKER``, an access key pair and the region. It imports nothing from this
repository and prints one JSON object: what the loop saw, for the test to check.
"""

from __future__ import annotations

import json
import sys

from sagemaker.train.training_session import (
    AdamParams,
    Datum,
    ModelInput,
    SamplingParams,
    ServiceClient,
    TensorData,
    TensorDtype,
)

BATCHES = [[1, 2, 3, 4, 5, 6, 7], [8, 9, 10, 11, 12]]


def main(role_arn: str) -> dict:
    # The output path is given, as the docstring's example gives it: without one the SDK names
    # a default bucket after the account id it asks STS for, through a client built with an
    # explicit AWS endpoint that no environment variable redirects (docs/sagemaker.md).
    svc = ServiceClient(role_arn=role_arn, s3_output_path="s3://my-bucket/output")
    base = svc.list_base_models()[0]
    tc = svc.create_lora_training_client(base_model=base, rank=4, alpha=8)
    steps = []
    for tokens in BATCHES:
        batch = [
            Datum(
                model_input=ModelInput.from_ints(tokens),
                loss_fn_inputs={
                    "target_tokens": TensorData(data=[*tokens[1:], 0], dtype=TensorDtype.INT64),
                    "weights": TensorData(data=[1.0] * len(tokens)),
                },
            )
        ]
        fwd_bwd = tc.forward_backward(batch, loss_fn="cross_entropy")
        optim = tc.optim_step(AdamParams(learning_rate=1e-4))
        steps.append({"fb": fwd_bwd.result().metrics, "optim": optim.result().metrics})
    sc = tc.save_weights_and_get_sampling_client()
    sampled = sc.sample([1, 2, 3], num_samples=2, sampling_params=SamplingParams(max_tokens=512))
    sequences = sampled.result().sequences
    packages = tc.list_model_packages()
    sessions = svc.list_sessions(name_contains=tc.training_session_name)
    tc.stop()
    svc.stop_session(tc.training_session_name)  # stopping twice is safe
    stopped = svc.list_sessions(name_contains=tc.training_session_name)
    deleted = svc.delete_model_package(sc.model_package_arn)
    return {
        "base_model": base,
        "session": tc.training_session_name,
        "steps": steps,
        "model_package_arn": sc.model_package_arn,
        "samples": [{"tokens": s.tokens, "stop_reason": s.stop_reason.value} for s in sequences],
        "packages": [p.model_package_arn for p in packages],
        "listed": [s.status for s in sessions],
        "after_stop": [s.status for s in stopped],
        "deleted": str(deleted),
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1]), default=str))
