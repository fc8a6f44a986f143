"""The overview: live sessions, this month's tokens and cost, recent sessions and checkpoints, and
the first steps when there is nothing yet."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from controlplane.metering.services import price_set
from controlplane.training_sessions.models import Checkpoint, Operation
from tests.support.pages import BASE_MODEL, finish, operation, train_tokens

from .test_pages_sessions import new_session

pytestmark = pytest.mark.django_db


def test_a_new_account_is_told_how_to_start(alice, worker):
    page = alice.get("/overview")
    assert page.status_code == 200
    html = page.content.decode()
    assert "No session yet: here is how to start one" in html
    assert "from loopwright import ServiceClient" in html
    assert f"role_arn=&quot;{alice.role_arn}&quot;" in html
    assert "base_url=&quot;http://testserver&quot;" in html
    assert f"create_lora_training_client(&quot;{BASE_MODEL}&quot;" in html
    assert 'href="/sessions/new"' in html and 'href="/iam/keys"' in html
    assert "No checkpoint yet" in html


def test_overview_counts_live_sessions_tokens_and_cost(alice, charlie, worker):
    price_set(
        base_model="*",
        meter="train_tokens",
        per_million=Decimal("2000000"),  # two dollars a token, to see it
        effective_from=timezone.now() - timedelta(minutes=5),
    )
    _session, model = new_session(alice, "alice-run")
    finish(operation(model, Operation.Kind.FORWARD_BACKWARD, 1, train_tokens(5)), {"metrics": {}})
    new_session(alice, "second")
    _other, other_model = new_session(charlie, "charlie-run")
    finish(operation(other_model, Operation.Kind.FORWARD_BACKWARD, 1, train_tokens(7)), {})
    Checkpoint.objects.create(
        tenant=alice.tenant,
        model=model,
        kind=Checkpoint.Kind.SAMPLER,
        name="s1",
        tinker_path=f"tinker://{model.id}/sampler_weights/s1",
        storage_path="/tmp/s1",
        lora=model.lora,
        base_model=BASE_MODEL,
    )
    html = alice.get("/overview").content.decode()
    assert 'Live sessions</div><div class="value">2</div>' in html
    assert 'Tokens this month</div><div class="value">5</div>' in html
    assert "$10.00" in html and "USD" not in html  # five tokens at two dollars, one money format
    assert "alice-run" in html and "second" in html and "charlie-run" not in html
    assert f"tinker://{model.id}/sampler_weights/s1" in html
    assert "No session yet" not in html


def test_bob_sees_sessions_but_not_the_usage_report(alice, bob, worker):
    new_session(alice, "alice-run")
    html = bob.get("/overview").content.decode()
    assert "alice-run" in html
    assert "billing:GetUsageReport" in html and "Tokens this month" not in html
