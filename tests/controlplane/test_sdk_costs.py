"""Our SDK against this server: a session's cost so far (printed when asked, and at its end with
``report_cost=True``), budgets made, read and deleted (a refusal by one is a
PaymentRequiredError naming it), and a checkpoint's expiry set and removed."""

from __future__ import annotations

import io
from decimal import Decimal

import pytest

import loopwright
from controlplane.training_sessions.models import Checkpoint
from loopwright import ServiceClient
from tests.support.sdk_transport import DjangoTransport
from tests.support.wire import ModelRun, datum, fwdbwd, open_session

pytestmark = pytest.mark.django_db


@pytest.fixture
def sdk(alice):
    client = ServiceClient(
        base_url="http://testserver",
        api_key=alice.key,
        role_arn=alice.role_arn,
        transport=DjangoTransport(),
        heartbeat_interval=3600,
    )
    yield client
    client.close()


def test_a_sessions_cost_so_far_and_at_its_end(alice, runtime, sdk, capsys) -> None:
    sid = open_session(alice)
    run = ModelRun(alice, runtime, sid)
    run.run("forward_backward", forward_backward_input={"data": [datum(list(range(1, 21)))],
                                                        "loss_fn": "cross_entropy"})  # fmt: skip
    usage = sdk.get_session_usage(sid)
    served = alice.get(f"sessions/{sid}/usage").json()
    assert (usage.total_quantity, usage.total_cost) == (20, served["total_cost"])
    assert [(line.meter, line.quantity) for line in usage.lines] == [("train_tokens", 20)]
    out = io.StringIO()
    sdk.print_cost(sid, file=out)
    cost = Decimal(served["total_cost"])
    assert out.getvalue() == f"session {sid}: 20 tokens, ${cost:,.6f} so far\n"

    with ServiceClient(
        base_url="http://testserver",
        api_key=alice.key,
        role_arn=alice.role_arn,
        transport=DjangoTransport(),
        heartbeat_interval=3600,
        report_cost=True,
    ) as reporting:
        opened = reporting.session_id
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"session {opened}: 0 tokens, $0.000000 in all"
    )


def test_budgets_from_the_sdk(alice, runtime, sdk) -> None:
    sid = open_session(alice)
    model = ModelRun(alice, runtime, sid).id
    made = sdk.create_budget(
        name="this-run", scope="session", scope_value=sid, unit="tokens", period="total", amount=0
    )
    assert (made.scope_value, made.amount, made.hard) == (sid, "0", True)
    assert [b.name for b in sdk.list_budgets()] == ["this-run"]
    assert sdk.get_budget("this-run").current_period.exhausted is True
    with pytest.raises(loopwright.PaymentRequiredError) as refused:
        sdk._runtime.http.request(
            "POST", "forward_backward", body=fwdbwd(model, 1, [datum([1, 2])])
        )
    assert refused.value.code == "budget_exhausted"
    assert "budget 'this-run'" in refused.value.detail
    with pytest.raises(loopwright.NotFoundError):
        sdk.get_budget("none-such")
    sdk.delete_budget("this-run")
    assert sdk.list_budgets() == []


def test_a_checkpoints_expiry_from_the_sdk(alice, runtime, sdk) -> None:
    run = ModelRun(alice, runtime, open_session(alice))
    path = run.run("save_weights", path="kept")["path"]
    sdk.set_checkpoint_ttl_from_tinker_path(path, 86_400)
    assert Checkpoint.objects.get(tinker_path=path).expires_at is not None
    sdk.set_checkpoint_ttl_from_tinker_path(path, None)
    assert Checkpoint.objects.get(tinker_path=path).expires_at is None
    with pytest.raises(loopwright.BadRequestError):
        sdk.set_checkpoint_ttl_from_tinker_path(path, 60)
