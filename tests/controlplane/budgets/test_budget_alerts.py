"""Budget thresholds: each of 50, 80 and 100 % fires once per period, with an audit event, a
banner and a webhook that a local HTTP server receives, signed with the secret shown once,
timestamped against replay, retried with backoff after a failure, sent only by housekeeping
(after the alert committed), never to an address that is not public unless allowed."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.utils import timezone

from controlplane.audit.models import AuditEvent
from controlplane.budgets import selectors
from controlplane.budgets.alerts import ALERT_ACTION, budgets_check
from controlplane.budgets.models import Budget, BudgetAlert, WebhookDelivery
from controlplane.budgets.webhooks import SIGNATURE_HEADER, deliveries_send, signature_valid
from controlplane.housekeeping.janitor import sweep
from controlplane.metering.models import UsageRecord
from controlplane.metering.rollup import usage_rows_write
from tests.support.tiny_worker import TINY

pytestmark = pytest.mark.django_db


class Receiver:
    """An HTTP server that records every POST and answers the status codes it is told to."""

    def __init__(self) -> None:
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.answers: list[int] = []  # the next answers; 200 when empty
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.append((dict(self.headers), body))
                status = receiver.answers.pop(0) if receiver.answers else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks/budget"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def events(self) -> list[dict]:
        return [json.loads(body) for _, body in self.received]


@pytest.fixture
def receiver(settings):
    settings.BUDGET_WEBHOOK_ALLOW_PRIVATE = True  # the receiver listens on this machine
    server = Receiver()
    yield server
    server.close()


def use(person, tokens: int, at: datetime | None = None) -> None:
    usage_rows_write(
        [
            UsageRecord(
                tenant=person.tenant,
                session_id="sess-x",
                base_model=TINY,
                meter="train_tokens",
                quantity=tokens,
                occurred_at=at or timezone.now(),
            )
        ]
    )


def budget(person, receiver: Receiver | None = None, **fields) -> dict:
    body = {"name": "monthly", "scope": "account", "unit": "tokens", "period": "month"}
    body |= {"amount": 1000, **fields}
    if receiver is not None:
        body["webhook_url"] = receiver.url
    r = person.post("billing/budgets", body)
    assert r.status_code == 201, r.content
    return r.json()


def test_each_threshold_fires_once_with_audit_banner_and_a_signed_webhook(
    alice, charlie, receiver
) -> None:
    made = budget(alice, receiver)
    secret = made["webhook_secret"]
    assert secret.startswith("whsec_") and len(secret) > 40
    shown = alice.get("billing/budgets/monthly").json()
    assert "webhook_secret" not in shown  # shown once
    assert shown["webhook"] == {"url": receiver.url, "secret_hint": secret[:10] + "…"}
    use(charlie, 5000)  # another account's usage counts for nothing here

    for tokens, fired in ((499, []), (1, [50]), (300, [80]), (250, [100])):
        use(alice, tokens)
        sweep()
        got = [e["threshold"] for e in receiver.events()[-len(fired) :]] if fired else []
        assert got == fired, (tokens, receiver.events())
    sweep()
    budgets_check()  # again: nothing new
    events = receiver.events()
    assert [e["threshold"] for e in events] == [50, 80, 100]
    assert len({e["id"] for e in events}) == 3

    last = events[-1]
    assert last["type"] == "budget.threshold_reached"
    assert last["account_id"] == alice.tenant.account_id
    assert last["budget"]["name"] == "monthly" and last["budget"]["amount"] == "1000"
    assert (last["spent"], last["percent"]) == ("1050", 105.0)
    assert "refused until it resets or is raised" in last["message"]
    for headers, body in receiver.received:
        assert headers["Content-Type"] == "application/json"
        assert headers["Loopwright-Event-Id"] == json.loads(body)["id"]
        assert signature_valid(headers[SIGNATURE_HEADER], body, secret, now=time.time())
        # a replay minutes later, or an altered body, does not pass
        assert not signature_valid(headers[SIGNATURE_HEADER], body, secret, now=time.time() + 600)
        assert not signature_valid(headers[SIGNATURE_HEADER], body + b" ", secret, now=time.time())

    audits = AuditEvent.objects.filter(tenant=alice.tenant, action=ALERT_ACTION).order_by("id")
    assert [a.principal for a in audits] == ["system:loopwright"] * 3
    assert "passed 50% of its limit of 1,000 tokens" in audits[0].reason
    assert AuditEvent.objects.filter(tenant=charlie.tenant, action=ALERT_ACTION).count() == 0
    banners = selectors.banners(tenant=alice.tenant, now=timezone.now())
    assert [(b.budget.name, b.alert.threshold) for b in banners] == [("monthly", 100)]
    assert selectors.banners(tenant=charlie.tenant, now=timezone.now()) == []


def test_a_new_period_fires_its_thresholds_again(alice, receiver) -> None:
    budget(alice, receiver, period="day", amount=100)
    today = timezone.now()
    use(alice, 100, today)
    budgets_check(now=today)
    tomorrow = datetime.combine(today.date() + timedelta(days=1), datetime.min.time(), tzinfo=UTC)
    use(alice, 60, tomorrow + timedelta(hours=1))
    budgets_check(now=tomorrow + timedelta(hours=2))
    fired = BudgetAlert.objects.order_by("period_start", "threshold")
    assert [(a.period_start.date(), a.threshold) for a in fired] == [
        (today.date(), 50),
        (today.date(), 80),
        (today.date(), 100),
        (tomorrow.date(), 50),
    ]


def test_a_failed_delivery_is_retried_with_backoff_and_then_abandoned(
    alice, receiver, settings
) -> None:
    settings.BUDGET_WEBHOOK_MAX_ATTEMPTS = 3
    budget(alice, receiver, thresholds=[50])
    use(alice, 600)
    receiver.answers = [500]
    now = timezone.now()
    budgets_check(now=now)
    assert deliveries_send(now=now) == (0, 1)
    row = WebhookDelivery.objects.get()
    assert (row.status, row.attempts, row.last_status_code) == ("failed", 1, 500)
    assert row.next_attempt_at >= now + timedelta(seconds=30)
    assert deliveries_send(now=now + timedelta(seconds=10)) == (0, 0)  # not due yet
    assert deliveries_send(now=now + timedelta(seconds=31)) == (1, 0)
    row.refresh_from_db()
    assert (row.status, row.attempts, row.last_status_code) == ("sent", 2, 200)
    assert deliveries_send(now=now + timedelta(days=1)) == (0, 0)  # sent: never again
    first, second = receiver.received
    assert first[1] == second[1]  # the same event, signed again at each attempt

    use(alice, 600)  # a second budget's alert is never delivered: the receiver keeps failing
    budget(alice, receiver, name="other", thresholds=[10])
    receiver.answers = [503] * 10
    later = now + timedelta(days=1)
    for minutes in (0, 1, 3):
        deliveries_send(now=later + timedelta(minutes=minutes))
    gone = WebhookDelivery.objects.get(budget__name="other")
    assert (gone.status, gone.attempts) == ("abandoned", 3)
    assert deliveries_send(now=later + timedelta(days=1)) == (0, 0)


def test_deliveries_to_a_name_of_a_private_address_are_refused(alice, receiver, settings) -> None:
    local = receiver.url.replace("127.0.0.1", "localhost")
    made = budget(alice, thresholds=[50], webhook_url=local)  # a name: checked when sent
    assert made["webhook_secret"]
    settings.BUDGET_WEBHOOK_ALLOW_PRIVATE = False
    use(alice, 600)
    budgets_check()
    assert deliveries_send() == (0, 1)
    row = WebhookDelivery.objects.get()
    assert "non-public address" in row.last_error and receiver.received == []


def test_a_rotated_secret_signs_from_then_on(alice, receiver) -> None:
    old = budget(alice, receiver, thresholds=[50, 90])["webhook_secret"]
    r = alice.client.patch(
        "/api/v1/billing/budgets/monthly", {"rotate_webhook_secret": True}, format="json"
    )
    new = r.json()["webhook_secret"]
    assert new != old and new.startswith("whsec_")
    use(alice, 600)
    sweep()
    headers, body = receiver.received[-1]
    assert signature_valid(headers[SIGNATURE_HEADER], body, new, now=time.time())
    assert not signature_valid(headers[SIGNATURE_HEADER], body, old, now=time.time())
    r = alice.client.patch("/api/v1/billing/budgets/monthly", {"webhook_url": None}, format="json")
    assert r.json()["webhook"] is None
    use(alice, 400)
    sweep()  # 90 % fires: audited, nothing sent
    assert len(receiver.received) == 1
    assert AuditEvent.objects.filter(action=ALERT_ACTION).count() == 2


def test_lowering_a_limit_fires_what_it_now_passes_at_once(alice) -> None:
    budget(alice)
    use(alice, 700)
    budgets_check()
    assert sorted(BudgetAlert.objects.values_list("threshold", flat=True)) == [50]
    r = alice.client.patch("/api/v1/billing/budgets/monthly", {"amount": 700}, format="json")
    assert r.status_code == 200
    assert sorted(BudgetAlert.objects.values_list("threshold", flat=True)) == [50, 80, 100]
    assert [a["threshold"] for a in r.json()["alerts"]] == [50, 80, 100]


def test_a_webhook_secret_moves_with_the_master_key(alice, receiver, settings) -> None:
    from controlplane.budgets.webhook_secrets import secret_open
    from controlplane.kms.keyring import MasterKey, TamperedError
    from controlplane.kms.master_rotation import master_key_rewrap

    old, new = "o" * 64, "n" * 64
    settings.KMS_MASTER_KEY, settings.KMS_MASTER_KEY_PREVIOUS = old, None
    secret = budget(alice, receiver)["webhook_secret"]
    counts = master_key_rewrap(old=MasterKey(old), new=MasterKey(new))
    assert counts["budget webhook secrets"] == 1
    settings.KMS_MASTER_KEY = new
    row = Budget.objects.get(name="monthly")
    assert (
        secret_open(account_id=alice.tenant.account_id, name="monthly", sealed=row.webhook_secret)
        == secret
    )
    settings.KMS_MASTER_KEY = old
    with pytest.raises(TamperedError):
        secret_open(account_id=alice.tenant.account_id, name="monthly", sealed=row.webhook_secret)


def test_the_holds_of_finished_operations_are_forgotten(alice, runtime) -> None:
    from controlplane.budgets.models import BudgetHold
    from controlplane.budgets.services import holds_prune
    from tests.support.wire import create_model, datum, fwdbwd, open_session

    budget(alice)
    model = create_model(alice, runtime, open_session(alice))
    r = alice.post("forward_backward", fwdbwd(model, 1, [datum([1, 2, 3])]))
    hold = BudgetHold.objects.get(operation_id=r.json()["request_id"])
    assert hold.amount == 3
    assert holds_prune() == 0  # still pending: it holds
    runtime.drain()
    assert holds_prune() == 1 and not BudgetHold.objects.exists()
