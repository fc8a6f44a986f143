"""The operator's command line: accounts, roles, keys, subnets and storage locations."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from controlplane.audit.models import AuditEvent
from controlplane.tenants.models import Tenant

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue().strip()


def test_an_account_a_role_and_keys_from_the_command_line(tmp_path) -> None:
    account = json.loads(run("create_tenant", "--name", "acme", "--json"))
    assert account["session_role_arn"].endswith(":role/LoopwrightSessionRole")
    owner = APIClient()
    owner.credentials(HTTP_X_API_KEY=account["api_key"])
    assert owner.get("/api/v1/auth/whoami").json()["membership_role"] == "owner"

    policy = tmp_path / "train.json"
    policy.write_text(
        json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": "sessions:*", "Resource": "*"}],
            }
        )
    )
    arn = run(
        "create_role", "--account", account["account_id"], "--name", "trainer",
        "--policy", f"train={policy}",
    )  # fmt: skip
    assert arn == f"arn:loopwright:iam::{account['account_id']}:role/trainer"
    key = run("create_api_key", "--account", account["account_id"], "--role", "trainer")
    as_role = APIClient()
    as_role.credentials(HTTP_X_API_KEY=key)
    assert as_role.get("/api/v1/auth/whoami").json()["arn"] == arn

    policy.write_text('{"Version": "2012-10-17", "Statement": [{"Effect": "Allow"}]}')
    with pytest.raises(CommandError, match=r"policies\.bad\.Statement"):
        run("create_role", "--account", account["account_id"], "--name", "x",
            "--policy", f"bad={policy}")  # fmt: skip
    with pytest.raises(CommandError, match="no account"):
        run("create_api_key", "--account", "000000000000", "--role", "trainer")

    run("vpc_subnets", "--account", account["account_id"], "--add", "subnet-0a0a0a0a")
    listed = run("storage_locations", "--account", account["account_id"], "--add", "s3://acme-ckpt")
    assert listed.split("\t")[0] == "s3://acme-ckpt"
    other = json.loads(run("create_tenant", "--name", "other", "--json"))
    with pytest.raises(CommandError, match="overlaps"):
        run("storage_locations", "--account", other["account_id"], "--add", "s3://acme-ckpt/x")
    with pytest.raises(CommandError, match="already registered"):
        run("vpc_subnets", "--account", other["account_id"], "--add", "subnet-0a0a0a0a")

    assert (
        run("vpc_subnets", "--account", account["account_id"], "--remove", "subnet-0a0a0a0a") == ""
    )
    with pytest.raises(CommandError, match="not registered"):
        run("vpc_subnets", "--account", account["account_id"], "--remove", "subnet-0a0a0a0a")

    tenant = Tenant.objects.get(account_id=account["account_id"])
    by_operator = AuditEvent.objects.filter(tenant=tenant, principal="system:operator")
    assert sorted(by_operator.values_list("action", flat=True)) == [
        "iam:CreateApiKey",
        "iam:CreateRole",
        "storage:RegisterLocation",
        "vpc:DeregisterSubnet",
        "vpc:RegisterSubnet",
    ]
