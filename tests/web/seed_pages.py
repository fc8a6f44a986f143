"""An account with something on every dashboard page, for the browser tests: alice's acme (the
resource pages' seed) plus a trained session with a failover, a sweep of runs in one model package
group, a member, a billing viewer, a pending invitation and audit rows of a failed change."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, timedelta

from django.db import transaction
from django.utils import timezone

from controlplane.fleet.services import worker_register
from controlplane.iam.provisioning import account_create
from controlplane.tenants.models import Membership
from controlplane.tenants.services import invitation_create, membership_add, user_create
from controlplane.training_sessions.models import (
    Operation,
    RecordedSample,
    Recovery,
    Session,
)
from tests.fleet import registration
from tests.people import PASSWORD
from tests.support.pages import BASE_MODEL, finish, operation, train_tokens

from .test_browser_pages import seed as seed_resources
from .test_pages_sessions import new_session

LONG_GROUP = "run-model-8f14e45fceea167a5a36dedd4bea2543-1c383cd30b7c298a"
LONG_ALIAS = "alias/production-checkpoints-of-the-research-team-in-eu-west-1"
LONG_EMAIL = "maximilian.alexander-hamilton@research-laboratory.example.com"
FB, STEP = Operation.Kind.FORWARD_BACKWARD, Operation.Kind.OPTIM_STEP


@dataclass
class Seeded:
    key_id: str
    session_id: str
    invitation_id: int
    account_id: str


class _Person:
    def __init__(self, tenant, role_arn: str) -> None:
        self.tenant, self.role_arn = tenant, role_arn


def _train(model, steps: int, start: float) -> None:
    seq = 1
    for step in range(1, steps + 1):
        loss = start / step + (0.3 if step % 3 == 0 else 0.0)
        finish(
            operation(model, FB, seq, train_tokens(64)),
            {"metrics": {"loss:sum": loss * 64, "tokens:sum": 64.0, "reward:mean": 1 - 1 / step}},
        )
        finish(operation(model, STEP, seq + 1), {})
        seq += 2


def seed_pages(tmp_path) -> Seeded:
    # one transaction, as the services expect (the tests that use it commit for the browser)
    with transaction.atomic():
        return _seed(tmp_path)


def _seed(tmp_path) -> Seeded:
    key_id = seed_resources(tmp_path)
    worker_register(**registration("gpu0", BASE_MODEL))
    owner = Membership.objects.select_related("tenant").get(user__username="alice@example.com")
    tenant = owner.tenant
    from controlplane.iam.resources import role_arn, user_arn

    alice = _Person(tenant, role_arn(tenant, "LoopwrightSessionRole"))
    group = f"arn:loopwright:registry::{tenant.account_id}:model-package-group/sweep"
    sessions = []
    for name, start in (("sweep lr 1e-4", 9.0), ("sweep lr 3e-4", 7.5)):
        session, model = new_session(alice, name)
        Session.objects.filter(pk=session.pk).update(platform={"model_package_group_arn": group})
        _train(model, 30, start)
        sessions.append((session, model))
    session, model = sessions[-1]
    for seq in range(61, 66):  # queued behind a failover
        operation(model, FB, seq, train_tokens(64))
    at = timezone.now().astimezone(UTC) - timedelta(minutes=3)
    Recovery.objects.create(
        tenant=tenant, session=session, model=model, cause=Recovery.Cause.WORKER_LOST,
        from_worker="gpu7", to_worker="gpu0", declared_at=at, declared_by="gpu0", requeued=5,
        recovery_seq=40, recovery_kind="snapshot", replayed=3,
        restored_at=at + timedelta(seconds=4.2), outcome=Recovery.Outcome.RESTORED,
    )  # fmt: skip
    bob = user_create(email="bob@example.com", password=PASSWORD)
    membership_add(tenant=tenant, user=bob, role=Membership.Role.MEMBER)
    vera = user_create(email="vera@example.com", password=PASSWORD)
    membership_add(tenant=tenant, user=vera, role=Membership.Role.BILLING_VIEWER)
    invitation, _ = invitation_create(
        tenant=tenant,
        email="carol@example.com",
        role="admin",
        actor=user_arn(tenant, "alice@example.com"),
        acting_membership=owner,
    )
    # names as long as real ones get: a run's own group, a key alias, a member's e-mail
    from controlplane.kms import services as kms

    from .test_pages_registry import seed_versions

    seed_versions(alice, LONG_GROUP, 1, tmp_path / "long")
    kms.key_create(tenant=tenant, actor="test", alias=LONG_ALIAS, description="checkpoints")
    long = user_create(email=LONG_EMAIL, password=PASSWORD)
    membership_add(tenant=tenant, user=long, role=Membership.Role.ADMIN)
    # a session made through the SageMaker API whose model is still loading on gpu0, keeping
    # the sequences of a sample request for training requests to cite
    from controlplane.sagemaker_sessions.services import training_session_create

    nightly = training_session_create(
        tenant=tenant, actor=alice.role_arn, name="nightly-rl", base_model=BASE_MODEL,
        lora={"rank": 8}, platform={"role_arn": alice.role_arn}, tags=None,
        base_model_arn="arn:aws:sagemaker:::hub-content/base", output_path="s3://acme/out",
    )  # fmt: skip
    RecordedSample.objects.create(
        id="op-recorded", tenant=tenant, session=nightly, prompt=b"\0" * 8, tokens=b"\0" * 64,
        logprobs=b"\0" * 64, lengths=[8, 8], size_bytes=136, expiries=[0, 0],
        expires_at=timezone.now() + timedelta(days=1),
    )  # fmt: skip
    account_create(
        email="charlie@example.com", password=PASSWORD, tenant_name="other", key_name="x"
    )
    return Seeded(key_id, session.id, invitation.pk, tenant.account_id)
