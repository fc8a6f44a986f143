"""``make serve`` prints working credentials for SageMaker's clients beside the Tinker ones, and
keeps them in the data folder (readable by its owner only), the same pair on every start."""

from __future__ import annotations

import stat

import pytest

from controlplane.access_keys.authentication import caller_of
from controlplane.housekeeping.management.commands.serve import Command
from tests.aws.signing import as_django, signed

pytestmark = pytest.mark.django_db


def test_the_local_pair_signs_as_the_local_owner(settings, tmp_path) -> None:
    settings.DATA_DIR = tmp_path
    command = Command()
    _key, role_arn = command._local_account()
    lines = command._sagemaker_exports(role_arn, "http://127.0.0.1:8000")
    found = dict(line.strip().removeprefix("export ").split("=", 1) for line in lines.splitlines())
    assert found["AWS_REGION"] == found["AWS_DEFAULT_REGION"] == "us-east-1"
    assert found["SAGEMAKER_TRAINING_SESSION_ENDPOINT"] == "http://127.0.0.1:8000/sagemaker"
    assert found["SAGEMAKER_TRAINING_SESSION_RUNTIME_ENDPOINT"] == (
        "http://127.0.0.1:8000/sagemaker-runtime"
    )
    assert found["AWS_ENDPOINT_URL_SAGEMAKER"] == "http://127.0.0.1:8000/sagemaker"
    caller = caller_of(
        as_django(signed(found["AWS_ACCESS_KEY_ID"], found["AWS_SECRET_ACCESS_KEY"]))
    )
    assert caller.principal.membership.role == "owner"
    assert caller.principal.tenant.account_id in role_arn
    kept = tmp_path / "sagemaker.env"
    assert kept.read_text() == lines
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert command._sagemaker_exports(role_arn, "http://127.0.0.1:8000") == lines  # kept
