"""sagemaker-train 1.27.0's own SDK loop, unchanged, in its own client environment
(``make sagemaker-venv``), against a running Loopwright: only ``SAGEMAKER_TRAINING_SESSION_*``,
``AWS_ENDPOINT_URL_SAGEMAKER``, an access key pair and the region are set. Its calls, as the
wire sees them: ListHubContents, DescribeHubContent, CreateModelPackageGroup (the default group
exists: ResourceInUse, then DescribeModelPackageGroup), CreateTrainingSession,
DescribeTrainingSession (polled), Execute/Get TrainingOperation (forwardBackward, optimizerStep,
saveWeights), Execute/Get SamplingOperation (loadWeightsForSampling, sample), ListModelPackages,
DescribeModelPackage, ListTrainingSessions, StopTrainingSession twice, DeleteModelPackage."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from .stack import ROOT, Stack
from .test_sagemaker_e2e import key_pair, sagemaker

pytestmark = pytest.mark.e2e

PYTHON = ROOT / ".venv-sagemaker" / "bin" / "python"


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    running = Stack("postgres-redis", tmp_path_factory.mktemp("sagemaker-train")).start()
    try:
        yield running
    finally:
        running.stop()


def _sdk() -> Path:
    found = subprocess.run(
        [PYTHON, "-c", "import importlib.metadata as m; print(m.version('sagemaker-train'))"],
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0 or found.stdout.strip() != "1.27.0":
        pytest.skip(
            "sagemaker-train 1.27.0 is not installed in .venv-sagemaker (make sagemaker-venv)"
        )
    return PYTHON


def test_sagemaker_trains_own_loop_runs_unchanged(stack: Stack) -> None:
    python = _sdk()
    pair = key_pair(stack)
    sm = sagemaker(stack, pair)
    sm.create_model_package_group(ModelPackageGroupName="sagemaker-default")
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "DJANGO", "AWS_"))
    } | {
        "SAGEMAKER_TRAINING_SESSION_ENDPOINT": f"{stack.url}/sagemaker",
        "SAGEMAKER_TRAINING_SESSION_RUNTIME_ENDPOINT": f"{stack.url}/sagemaker-runtime",
        "AWS_ENDPOINT_URL_SAGEMAKER": f"{stack.url}/sagemaker",
        "AWS_ACCESS_KEY_ID": pair["access_key_id"],
        "AWS_SECRET_ACCESS_KEY": pair["secret_access_key"],
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "HF_HUB_OFFLINE": "1",
    }
    out = subprocess.run(
        [python, str(Path(__file__).with_name("sagemaker_train_loop.py")), stack.roles["alice"]],
        capture_output=True,
        text=True,
        env=env,
        cwd="/",  # nothing of this repository on its path
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-5000:] + stack.logs()
    seen = json.loads(out.stdout.strip().splitlines()[-1])

    first, second = (step["fb"]["loss:sum"] for step in seen["steps"])
    assert first > 0 and second > 0 and all(step["optim"] for step in seen["steps"])
    assert len(seen["samples"]) == 2 and all(s["tokens"] for s in seen["samples"])
    assert seen["model_package_arn"] in seen["packages"]
    assert seen["listed"] == ["Running"]
    assert seen["after_stop"][0] in ("Stopping", "Stopped")

    # the session's bill is what the loop sent and got back
    detail = sm.describe_training_session(TrainingSessionName=seen["session"])
    usage = detail["TrainingSessionDetail"]["BillableTokenUsage"]
    assert usage["TrainingTokenCount"] == 7 + 5
    assert usage["PrefillTokenCount"] == 3
    assert usage["SampleTokenCount"] == sum(len(s["tokens"]) for s in seen["samples"])
    # its checkpoints are in the default group it found there; the sampled version is gone
    versions = sm.list_model_packages(ModelPackageGroupName="sagemaker-default")
    arns = [v["ModelPackageArn"] for v in versions["ModelPackageSummaryList"]]
    assert seen["model_package_arn"] not in arns
