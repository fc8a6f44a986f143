"""The official tinker SDK 0.38, in a process of its own, against this server: RestClient sets
and removes a checkpoint's expiry without loading it, AdminClient reads the hourly billing
usage events (parsed as tinker's own types: the same tokens and costs as our report) and the
checkpoint storage kept now."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.utils import timezone

from controlplane.iam.services import api_key_create
from controlplane.metering.reports import usage_report
from controlplane.training_sessions.models import Checkpoint, Session
from tests.support.wire import ModelRun, datum

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
PYTHON = ROOT / ".venv-tinker038" / "bin" / "python"


def _tinker() -> Path:
    found = subprocess.run(
        [PYTHON, "-c", "import tinker; print(tinker.__version__)"],
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0 or found.stdout.strip() != "0.38.0":
        pytest.skip("tinker 0.38.0 is not installed in .venv-tinker038 (make tinker-venv)")
    return PYTHON


def test_tinkers_admin_and_rest_clients_read_costs_and_set_expiry(
    alice, runtime, live_server
) -> None:
    python = _tinker()
    sid = alice.post(
        "create_session",
        {"tags": ["run:x"], "user_metadata": {"team": "rl"}, "sdk_version": "t",
         "role_arn": alice.role_arn},
    ).json()["session_id"]  # fmt: skip
    run = ModelRun(alice, runtime, sid)
    data = {"data": [datum(list(range(1, 31)))], "loss_fn": "cross_entropy"}
    run.run("forward_backward", forward_backward_input=data)
    path = run.run("save_weights", path="kept")["path"]
    _, key = api_key_create(tenant=alice.tenant, user=alice_user(alice), name="tinker")
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    window = [(now - timedelta(hours=1)).isoformat(), (now + timedelta(hours=1)).isoformat()]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "DJANGO"))}
    out = subprocess.run(
        [python, str(Path(__file__).with_name("tinker_admin.py")), live_server.url, path, *window],
        capture_output=True,
        text=True,
        env=env | {"TINKER_API_KEY": key},
        cwd="/",  # nothing of this repository on its path
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["version"] == "0.38.0"
    assert seen["tokens"] == {f"{sid}/training": 30}
    today = timezone.now().date()
    ours = usage_report(tenant=alice.tenant, start=today, end=today, session_id=sid)
    assert Decimal(str(seen["cost"][f"{sid}/training"])) == ours.cost
    assert seen["kinds"] == ["TrainingBillingEvent"]
    assert seen["sessions"] == {sid: {"team": "rl"}}
    ckpt = Checkpoint.objects.get(tinker_path=path)
    assert 7100 < seen["expiry_seconds"] < 7300  # two hours from when it was set
    assert ckpt.expires_at is None  # then removed
    assert seen["storage"]["checkpoints"] == 1 and seen["storage"]["rate"] == 0.1
    assert seen["storage"]["bytes"] > 0
    assert Session.objects.filter(tenant=alice.tenant).count() == 1  # the SDK made no session


def alice_user(alice):
    from controlplane.tenants.models import Membership

    return Membership.objects.get(tenant=alice.tenant, role="owner").user
