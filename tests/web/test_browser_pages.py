"""The registry, IAM, KMS, VPC, billing and audit pages in a real browser: log in through the
form, visit each with data in it, submit the policy editor with an error, create an API key and
save a screenshot of each page (one at a phone's 390px width) for people to look at."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest
from django.utils import timezone

from controlplane.audit.services import audit_record
from controlplane.budgets.services import budget_create
from controlplane.iam.provisioning import account_create
from controlplane.kms import services as kms
from controlplane.metering.models import Meter
from controlplane.registry.services import package_update_approval
from controlplane.tenants.services import storage_location_register, subnet_register
from controlplane.training_sessions.models import Session
from tests.people import PASSWORD

from .browser import browser_page, screenshot
from .test_pages_billing import BASE, OTHER, prices, usage
from .test_pages_iam import trusting
from .test_pages_registry import seed_versions

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SUBNET = "subnet-0a1b2c3d4e5f6a7b8"


class Person:
    def __init__(self, membership) -> None:
        self.tenant, self.user = membership.tenant, membership.user


def seed(tmp_path) -> str:
    """alice's account with something on every page; the id of her KMS key."""
    account = account_create(
        email="alice@example.com", password=PASSWORD, tenant_name="acme", key_name="laptop"
    )
    alice = Person(account.membership)
    alice.role_arn = account.session_role.arn
    alice.user.is_staff = True  # an operator too, to see the registration forms
    alice.user.save(update_fields=["is_staff"])
    tenant = alice.tenant
    trusting(alice)
    key = kms.key_create(tenant=tenant, actor="test", alias="alias/evals", description="evals")
    kms.key_rotate(tenant=tenant, actor="test", key_id=str(key.id))
    kms.key_create(tenant=tenant, actor="test", description="old key")
    versions = seed_versions(alice, "my-rl", 3, tmp_path / "ckpt")
    package_update_approval(
        tenant=tenant, actor=account.owner_arn, group_name="my-rl", version=2, status="Approved",
        description="beats v1 on the eval",
    )  # fmt: skip
    package_update_approval(
        tenant=tenant, actor=account.owner_arn, group_name="my-rl", version=1, status="Rejected"
    )
    subnet_register(tenant=tenant, subnet_id=SUBNET, description="eu-west-1a")
    storage_location_register(tenant=tenant, uri="s3://acme-ckpt/loopwright")
    Session.objects.filter(pk=versions[0].session_id).update(
        platform={"vpc_config": {"subnets": [SUBNET], "security_group_ids": []}}
    )
    prices()
    for day in range(1, 21):
        at = datetime(2025, 3, day, 12, tzinfo=UTC)
        sid = versions[0].session_id
        usage(tenant, sid, BASE, Meter.TRAIN_TOKENS, 40_000 * day, at)
        usage(tenant, sid, BASE, Meter.SAMPLED_TOKENS, 25_000 * (day % 7 + 1), at)
        usage(tenant, "sess-b", OTHER, Meter.PREFILL_TOKENS, 90_000 * (day % 3), at)
        usage(tenant, "sess-b", OTHER, Meter.FORWARD_TOKENS, 15_000 * (day % 5), at)
    usage(tenant, "sess-b", OTHER, Meter.SAMPLED_TOKENS, 1_500_000, timezone.now())  # invoiced
    usage(tenant, "sess-b", BASE, Meter.TRAIN_TOKENS, 2_750_000, timezone.now())
    budget_create(  # $1.20 spent this month: reached, so every page shows the banner
        tenant=tenant, actor=account.owner_arn, name="team-month", scope="account", unit="usd",
        period="month", amount="1",
    )  # fmt: skip
    for allowed in (True, False):
        audit_record(
            tenant=tenant,
            principal=f"arn:loopwright:iam::{tenant.account_id}:user/bob@example.com",
            action="iam:CreateRole",
            resource=f"arn:loopwright:iam::{tenant.account_id}:role/Intruder",
            allowed=allowed,
            effect="Allow" if allowed else "ImplicitDeny",
            mutating=True,
            reason="" if allowed else "no policy allows iam:CreateRole on the role",
            source_ip="10.0.0.7",
        )
    return str(key.id)


def test_resource_pages_in_a_browser(live_server, tmp_path) -> None:
    key_id = seed(tmp_path)
    url = live_server.url
    shots = []
    with browser_page() as page:
        page.on("dialog", lambda dialog: dialog.accept())
        page.goto(f"{url}/registry")
        assert "/login" in page.url
        page.fill("input[name=email]", "alice@example.com")
        page.fill("input[name=password]", PASSWORD)
        page.click("form[action='/login'] button[type=submit]")
        page.wait_for_url(f"{url}/registry")

        def visit(path: str, name: str, expect: str) -> None:
            page.goto(f"{url}{path}")
            assert expect in page.content(), (path, expect)
            shots.append(screenshot(page, name))

        visit("/registry", "registry-groups", "my-rl")
        visit("/registry/groups/my-rl", "registry-group", "PendingManualApproval")
        page.click("form[action$='/versions/3/approval'] button:has-text('Approve')")
        page.wait_for_selector(".messages li.success")
        assert "Version 3 of my-rl is now Approved" in page.content()
        visit("/registry/groups/my-rl/versions/2", "registry-version", "beats v1 on the eval")

        visit("/iam/roles", "iam-roles", "LoopwrightSessionRole")
        visit("/iam/roles/Deployer", "iam-role", "sts:AssumeRole")
        page.goto(f"{url}/iam/roles/Deployer/policies/new")
        page.fill("input[name=policy_name]", "readers")
        bad = {"Version": "2012-10-17",
               "Statement": [{"Sid": "Read", "Effect": "Allow", "Action": "registry:Lst*", "Resource": "*"}]}  # fmt: skip
        page.fill("textarea[name=document]", json.dumps(bad, indent=2))
        page.click("form.stacked button[type=submit]")
        page.wait_for_selector("#id_document_error")
        error = page.inner_text("#id_document_error")
        assert "Statement[0].Action" in error and "document." not in error, error
        assert page.get_attribute("textarea[name=document]", "aria-invalid") == "true"
        shots.append(screenshot(page, "iam-policy-editor-error"))
        page.fill("textarea[name=document]", json.dumps(bad).replace("Lst", "List"))
        page.click("form.stacked button[type=submit]")
        page.wait_for_url(f"{url}/iam/roles/Deployer")
        assert "registry:List*" in page.content()

        visit("/iam/users", "iam-users", "alice@example.com")
        page.goto(f"{url}/iam/keys")
        page.fill("#id_name", "ci runner")
        page.select_option("#id_owner", "role:Deployer")
        page.click("form[action='/iam/keys'][method=post] button[type=submit]")
        page.wait_for_selector(".secret")
        assert re.fullmatch(r"tml-[0-9a-f]+\.\S+", page.inner_text("#raw-key"))
        shots.append(screenshot(page, "iam-keys-new"))
        visit(
            "/iam/simulator?principal=role%3ADeployer&action=registry%3AListModelPackages&resource=*",
            "iam-simulator",
            "Allowed",
        )

        visit("/kms", "kms-keys", "alias/evals")
        visit(f"/kms/keys/{key_id}", "kms-key", "Rotate now")
        page.click(f"form[action='/kms/keys/{key_id}/disable'] button")
        page.wait_for_selector(".messages li.success")
        page.click(f"form[action='/kms/keys/{key_id}/enable'] button")
        page.wait_for_selector(".messages li.success")

        visit("/vpc", "vpc", SUBNET)
        visit("/billing?start=2025-03-01&end=2025-03-31", "billing", "By session")
        visit("/billing/budgets", "billing-budgets", "Create a budget")
        visit("/billing/budgets/team-month", "billing-budget", "has reached its limit of $1.00")
        visit("/audit", "audit", "iam:CreateRole")
        visit("/audit?decision=deny", "audit-denied", "no policy allows")

    with browser_page(width=390, height=844) as phone:
        phone.goto(f"{url}/login?next=/billing%3Fstart%3D2025-03-01%26end%3D2025-03-31")
        phone.fill("input[name=email]", "alice@example.com")
        phone.fill("input[name=password]", PASSWORD)
        phone.click("form[action='/login'] button[type=submit]")
        phone.wait_for_selector("svg.chart")
        shots.append(screenshot(phone, "billing-390px"))
        phone.goto(f"{url}/iam/roles/Deployer")
        shots.append(screenshot(phone, "iam-role-390px"))
    assert all(p.stat().st_size > 10_000 for p in shots)
