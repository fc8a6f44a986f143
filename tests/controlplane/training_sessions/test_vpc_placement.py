"""VPC settings constrain where a session's models run: bad settings are a 400 naming the field;
a model no worker can take waits with the reason, its operations queue up and run in order once
a worker takes it; charlie sees none of it."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.db import connection, connections
from django.utils import timezone
from pydantic import ValidationError

from controlplane.edge.errors import field_path
from controlplane.errors import DomainError
from controlplane.fleet.models import Worker
from controlplane.housekeeping.janitor import sweep
from controlplane.operations import training
from controlplane.operations.session_end import sessions_expire_idle
from controlplane.training_sessions.models import Operation, SamplingSession, Session, TrainingModel
from controlplane.training_sessions.services.sessions import session_create
from loopwright import ServiceClient
from tests.support.tiny_worker import TINY
from tests.support.wire import create_model, datum, fwdbwd, open_session, result
from workers.runtime import WorkerRuntime, WorkerSettings

pytestmark = pytest.mark.django_db

SUBNET_A = "subnet-0a1b2c3d4e5f60718"
SUBNET_B = "subnet-0b1c2d3e"
SUBNET_C = "subnet-0c0c0c0c0c0c"
SG_1 = "sg-0123456789abcdef0"
SG_2 = "sg-89abcdef"
VPC_B = {"subnets": [SUBNET_B], "security_group_ids": [SG_1]}


@pytest.fixture(autouse=True)
def _alices_subnets(people) -> None:
    """The operator has connected workers to alice's VPC: its subnets are hers."""
    from controlplane.tenants.services import subnet_register

    for subnet in (SUBNET_A, SUBNET_B, SUBNET_C):
        subnet_register(tenant=people[0].tenant, subnet_id=subnet)


@pytest.fixture
def add_worker(db, tiny_host_factory):
    """Start another in-process worker on the tiny model, reaching the networks given."""

    def start(name: str, subnets=(), security_groups=(), capacity: int = 4) -> WorkerRuntime:
        settings = WorkerSettings(
            name=name,
            base_model=TINY,
            capacity=capacity,
            subnet_ids=tuple(subnets),
            security_group_ids=tuple(security_groups),
            snapshot_every_steps=0,
            snapshot_every_seconds=0,
        )
        return WorkerRuntime(settings, host=tiny_host_factory(), heartbeat=False)

    return start


def vpc_session(person, vpc: dict | None) -> str:
    body = {"tags": [], "sdk_version": "test", "role_arn": person.role_arn}
    if vpc is not None:
        body["vpc_config"] = vpc
    r = person.post("create_session", body)
    assert r.status_code == 200, r.content
    return r.json()["session_id"]


def new_model(person, session_id: str, seq: int = 0) -> dict:
    """create_model's future: accepted whether or not a worker can take the model now."""
    body = {"session_id": session_id, "model_seq_id": seq, "base_model": TINY}
    r = person.post("create_model", {**body, "lora_config": {"rank": 4, "seed": 0}})
    assert r.status_code == 200, r.content
    return r.json()


def info(person, model_id: str) -> dict:
    r = person.post("get_info", {"model_id": model_id})
    assert r.status_code == 200, r.content
    return r.json()


def pending(person, fut: dict) -> dict:
    r = person.post("retrieve_future", {"request_id": fut["request_id"]})
    assert r.status_code == 408 and r.json()["type"] == "try_again", r.content
    return r.json()


# -- validation ------------------------------------------------------------------------------
BAD = [
    ({"subnets": [SUBNET_A, SUBNET_B, "subnet-xyz"], "security_group_ids": [SG_1]}, "vpc_config.subnets[2]", "subnet-xyz"),
    ({"subnets": ["subnet-0A1B2C3D"], "security_group_ids": [SG_1]}, "vpc_config.subnets[0]", "lowercase hex"),
    ({"subnets": ["subnet-0a1b2c3"], "security_group_ids": [SG_1]}, "vpc_config.subnets[0]", "8 to 17"),
    ({"subnets": ["subnet-" + "a" * 18], "security_group_ids": [SG_1]}, "vpc_config.subnets[0]", "8 to 17"),
    ({"subnets": [SUBNET_A], "security_group_ids": [SG_1, "sg-1"]}, "vpc_config.security_group_ids[1]", "not a security group id"),
    ({"subnets": [SUBNET_A], "security_group_ids": [SUBNET_B]}, "vpc_config.security_group_ids[0]", "'sg-'"),
    ({"subnets": [7], "security_group_ids": [SG_1]}, "vpc_config.subnets[0]", "string"),
    ({"subnets": [], "security_group_ids": [SG_1]}, "vpc_config.subnets", "1 to 16 subnet ids, got 0"),
    ({"subnets": [f"subnet-{i:08x}" for i in range(17)], "security_group_ids": [SG_1]}, "vpc_config.subnets", "1 to 16 subnet ids, got 17"),
    ({"subnets": [SUBNET_A], "security_group_ids": []}, "vpc_config.security_group_ids", "1 to 5 security group ids, got 0"),
    ({"subnets": [SUBNET_A], "security_group_ids": [f"sg-{i:08x}" for i in range(6)]}, "vpc_config.security_group_ids", "1 to 5 security group ids, got 6"),
    ({"subnets": [SUBNET_A, SUBNET_B, SUBNET_A], "security_group_ids": [SG_1]}, "vpc_config.subnets", "listed twice, at [0] and [2]"),
    ({"subnets": [SUBNET_A], "security_group_ids": [SG_2, SG_2]}, "vpc_config.security_group_ids", "listed twice"),
    ({"subnets": [SUBNET_A]}, "vpc_config.security_group_ids", "required"),
    ({"subnet_ids": [SUBNET_A], "subnets": [SUBNET_A], "security_group_ids": [SG_1]}, "vpc_config.subnet_ids", "unknown field"),
    ({}, "vpc_config.subnets", "required"),
    ([SUBNET_A], "vpc_config", "dictionary"),
]  # fmt: skip


@pytest.mark.parametrize(("vpc", "field", "words"), BAD)
def test_bad_vpc_config_is_a_400_naming_the_field(alice, vpc, field, words) -> None:
    r = alice.post(
        "create_session",
        {"tags": [], "sdk_version": "test", "role_arn": alice.role_arn, "vpc_config": vpc},
    )
    body = r.json()
    assert r.status_code == 400 and body["code"] == "invalid_request", body
    assert body["field"] == field and body["detail"].startswith(f"{field}: "), body
    assert words in body["detail"], body
    assert not Session.objects.exists()
    # the SDK checks it the same way before sending anything
    with pytest.raises(ValidationError) as raised:
        ServiceClient(base_url="http://127.0.0.1:9", api_key="tml-x", vpc_config=vpc)  # type: ignore[arg-type]
    inner = field_path(raised.value.errors()[0]["loc"])
    assert (f"vpc_config.{inner}" if inner else "vpc_config") == field
    # and so does the service, whoever calls it
    with pytest.raises(DomainError) as refused:
        session_create(tenant=alice.tenant, platform={"vpc_config": vpc})
    assert refused.value.field == field


def test_a_good_vpc_config_is_stored_as_given(alice) -> None:
    vpc = {"subnets": [SUBNET_B, SUBNET_A], "security_group_ids": [SG_2, SG_1]}
    sid = vpc_session(alice, vpc)
    assert alice.get(f"sessions/{sid}").json()["platform"]["vpc_config"] == vpc


def test_worker_networks_are_checked_at_registration(add_worker) -> None:
    with pytest.raises(ValueError, match="not subnet ids"):
        add_worker("w-bad", subnets=["subnet-nope"])
    with pytest.raises(ValueError, match="open network"):
        add_worker("w-sg-only", security_groups=[SG_1])


def test_worker_flags_or_environment_name_its_networks(monkeypatch) -> None:
    from workers import run
    from workers.celery_app import app

    monkeypatch.setattr(app, "worker_main", lambda argv: None)
    for variable in WorkerSettings(name="any").to_env():
        monkeypatch.delenv(variable, raising=False)  # main() sets them; restored after
    monkeypatch.setenv("LOOPWRIGHT_WORKER_CAPACITY", "2")
    monkeypatch.setenv("LOOPWRIGHT_WORKER_SUBNETS", f"{SUBNET_A}, {SUBNET_B}")
    monkeypatch.setenv("LOOPWRIGHT_WORKER_SECURITY_GROUPS", SG_1)
    run.main(["--name", "w1"])
    networks = WorkerSettings.from_env()
    assert (networks.subnet_ids, networks.security_group_ids) == ((SUBNET_A, SUBNET_B), (SG_1,))
    run.main(["--name", "w1", "--subnet", SUBNET_C, "--security-group", SG_2, "--security-group", SG_1])  # fmt: skip
    networks = WorkerSettings.from_env()
    assert (networks.subnet_ids, networks.security_group_ids) == ((SUBNET_C,), (SG_2, SG_1))


# -- waiting and placement -------------------------------------------------------------------
def test_a_session_no_worker_reaches_waits_then_runs_in_order_when_one_registers(
    alice, runtime, add_worker
) -> None:
    sid = vpc_session(alice, VPC_B)
    created = new_model(alice, sid)
    mid = created["model_id"]
    reason = (
        f"waiting for a worker that reaches {SUBNET_B} with {SG_1}: "
        f"1 worker serves {TINY}, none reaches these subnets"
    )
    described = info(alice, mid)
    assert (described["placement"], described["status_reason"], described["worker"]) == (
        "waiting_for_network",
        reason,
        None,
    )
    session = alice.get(f"sessions/{sid}").json()
    assert (session["placement"], session["status_reason"]) == ("waiting_for_network", reason)
    queue = {
        "position": 1,
        "waiting": 1,
        "waits_for": "network",
        "base_model": TINY,
        "network": f"{SUBNET_B} with {SG_1}",
        "replicas": 1,
        "reason": reason,
        "queued_at": described["queue"]["queued_at"],
        "estimated_start_at": None,
        "estimate_basis": "no estimate: it waits for a worker that reaches its network to start",
        "kind": "model",
    }
    assert described["queue"] == session["queue"] == queue
    assert session["models"] == [
        {
            "model_id": mid,
            "state": "creating",
            "placement": "waiting_for_network",
            "status_reason": reason,
            "worker": None,
            "replicas": 1,
            "group": None,
            "queue": queue,
        }
    ]
    # operations queue up (out of order, with a retry); nothing runs anywhere
    opt = alice.post(
        "optim_step", {"model_id": mid, "seq_id": 2, "adam_params": {"learning_rate": 0.01}}
    ).json()
    fb = alice.post("forward_backward", fwdbwd(mid, 1, [datum([1, 2, 3])])).json()
    assert alice.post("forward_backward", fwdbwd(mid, 1, [datum([1, 2, 3])])).json() == fb
    assert alice.post("forward_backward", fwdbwd(mid, 1, [datum([4])])).status_code == 409
    again = alice.post(
        "create_model",
        {"session_id": sid, "model_seq_id": 0, "base_model": TINY, "lora_config": {"rank": 4, "seed": 0}},
    )  # fmt: skip
    assert again.json() == created
    assert runtime.drain() == 0
    try_again = pending(alice, created)
    assert try_again["queue_state"] == "paused_capacity"
    assert try_again["queue_state_reason"] == f"{reason} (1st of 1 in line)"
    assert try_again["queue"] == queue
    pending(alice, fb)
    assert set(Operation.objects.filter(model_id=mid).values_list("status", "worker")) == {
        ("pending", None)
    }

    # a worker that reaches the subnet and offers the group registers: the model is its own
    vpc = add_worker("vpc0", subnets=[SUBNET_A, SUBNET_B], security_groups=[SG_1, SG_2])
    described = info(alice, mid)
    assert (described["placement"], described["status_reason"], described["worker"]) == (
        "placed",
        "",
        "vpc0",
    )
    assert described["queue"] is None and alice.get(f"sessions/{sid}").json()["queue"] is None
    assert runtime.drain() == 0  # the open worker has nothing of it
    assert result(alice, vpc, created) == {"model_id": mid}
    assert result(alice, vpc, fb)["metrics"]["tokens:sum"] == 3.0
    assert result(alice, vpc, opt)["metrics"]["step:max"] == 1.0
    ran = Operation.objects.filter(model_id=mid).order_by("started_at")
    assert [(op.seq_id, op.status, op.worker.name) for op in ran] == [
        (0, "done", "vpc0"),
        (1, "done", "vpc0"),
        (2, "done", "vpc0"),
    ]
    assert alice.get(f"sessions/{sid}").json()["state"] == "active"
    assert vpc.host.has_adapter(mid) and not runtime.host.has_adapter(mid)


def test_open_network_sessions_never_land_on_vpc_workers(alice, charlie, add_worker) -> None:
    vpc = add_worker("vpc0", subnets=[SUBNET_B], security_groups=[SG_1])
    open_sid = vpc_session(alice, None)
    waiting = new_model(alice, open_sid)["model_id"]
    assert info(alice, waiting)["status_reason"] == (
        f"waiting for an open-network worker: 1 worker serves {TINY}, "
        "each serves only sessions in its VPC subnets"
    )
    # a sampler of the base model waits in the queue too, and its samples with it
    base = alice.post(
        "create_sampling_session",
        {"session_id": open_sid, "sampling_session_seq_id": 0, "base_model": TINY},
    )
    assert base.status_code == 200, base.content
    base_queue = base.json()["queue"]
    assert (base_queue["kind"], base_queue["waits_for"], base_queue["position"]) == (
        "sampler",
        "network",
        1,
    )
    assert "open-network worker" in base_queue["reason"]
    base_id = base.json()["sampling_session_id"]
    assert alice.get(f"samplers/{base_id}").json()["queue"] == base_queue
    assert charlie.get(f"samplers/{base_id}").status_code == 404
    sampler = alice.post(
        "create_sampling_session",
        {"session_id": open_sid, "sampling_session_seq_id": 1, "model_id": waiting},
    )
    # a sampler of the waiting model's live weights waits with it
    assert sampler.status_code == 200
    live_sampler = SamplingSession.objects.get(pk=sampler.json()["sampling_session_id"])
    assert live_sampler.worker is None

    # reaching the subnet is not enough: every security group must be offered
    other_group = vpc_session(
        alice, {"subnets": [SUBNET_C, SUBNET_B], "security_group_ids": [SG_1, SG_2]}
    )
    mid = new_model(alice, other_group)["model_id"]
    assert info(alice, mid)["status_reason"] == (
        f"waiting for a worker that reaches {SUBNET_C} or {SUBNET_B} with {SG_1} and {SG_2}: "
        f"1 worker serves {TINY}, 1 reaches these subnets but none offers all these security groups"
    )  # fmt: skip

    # an open-network worker registers: the open session's model goes there, not the VPC one
    open_worker = add_worker("open0")
    assert info(alice, waiting)["worker"] == "open0"
    live_sampler.refresh_from_db()
    assert live_sampler.worker.name == "open0"  # it followed its model
    described = alice.get(f"samplers/{base_id}").json()  # and the base sampler left the queue
    assert (described["worker"], described["queue"]) == ("open0", None)
    assert info(alice, mid)["placement"] == "waiting_for_network"
    assert vpc.drain() == 0
    assert open_worker.drain() == 1


def test_no_live_worker_of_the_base_model_waits_until_one_heartbeats(alice, runtime) -> None:
    Worker.objects.update(state=Worker.State.GONE)
    created = new_model(alice, open_session(alice))
    described = info(alice, created["model_id"])
    assert (described["placement"], described["status_reason"]) == (
        "waiting_for_worker",
        f"waiting for a worker that serves {TINY}: none is live",
    )
    runtime.beat()  # back: it takes the model
    assert info(alice, created["model_id"])["worker"] == "test0"
    assert result(alice, runtime, created) == {"model_id": created["model_id"]}


def test_capacity_full_waits_and_is_placed_oldest_first_when_a_slot_frees(alice, runtime) -> None:
    Worker.objects.update(capacity=1)
    sid = open_session(alice)
    first = create_model(alice, runtime, sid)
    second = new_model(alice, sid, seq=1)
    third = new_model(alice, sid, seq=2)
    reason = f"waiting for a free slot on an open-network worker: 1 serves {TINY}, it is full"
    for fut in (second, third):
        described = info(alice, fut["model_id"])
        assert (described["placement"], described["status_reason"]) == (
            "waiting_for_capacity",
            reason,
        )
    queued = alice.post("forward_backward", fwdbwd(second["model_id"], 1, [datum([1, 2])])).json()
    runtime.beat()  # nothing has freed: still waiting
    assert info(alice, second["model_id"])["placement"] == "waiting_for_capacity"

    assert alice.post("unload_model", {"model_id": first}).status_code == 200
    runtime.drain()
    runtime.beat()  # the slot is free: the older of the two takes it
    assert info(alice, second["model_id"])["worker"] == "test0"
    assert info(alice, third["model_id"])["placement"] == "waiting_for_capacity"
    assert result(alice, runtime, second) == {"model_id": second["model_id"]}
    assert "metrics" in result(alice, runtime, queued)

    # a slot frees again; a newer model asking now queues behind the older one that waits
    alice.post("unload_model", {"model_id": second["model_id"]})
    runtime.drain()
    fourth = new_model(alice, sid, seq=3)
    assert info(alice, fourth["model_id"])["status_reason"] == reason
    assert sweep()["placed_models"] == [third["model_id"]]  # the janitor's pass
    assert info(alice, fourth["model_id"])["placement"] == "waiting_for_capacity"
    alice.post("unload_model", {"model_id": third["model_id"]})
    runtime.drain()
    runtime.beat()
    assert result(alice, runtime, fourth) == {"model_id": fourth["model_id"]}


@pytest.mark.django_db(transaction=True)
def test_concurrent_creates_never_overfill_a_worker(alice, runtime) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("concurrent placements need PostgreSQL's row locks")
    Worker.objects.update(capacity=2)
    sessions = [vpc_session(alice, None) for _ in range(6)]

    def create(session_id: str) -> str:
        try:
            op = training.model_create(
                tenant=alice.tenant,
                session_id=session_id,
                model_seq_id=0,
                base_model=TINY,
                lora={"rank": 4},
            )
            return op.model_id
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=6) as pool:
        created = list(pool.map(create, sessions))
    models = TrainingModel.objects.filter(pk__in=created)
    assert models.filter(worker__name="test0").count() == 2
    assert models.filter(placement="waiting_for_capacity", worker=None).count() == 4


def test_a_waiting_model_unloads_stops_and_expires_at_once(alice, runtime, add_worker) -> None:
    sid = vpc_session(alice, VPC_B)
    created = new_model(alice, sid)
    mid = created["model_id"]
    fb = alice.post("forward_backward", fwdbwd(mid, 1, [datum([1, 2])])).json()
    unloaded = alice.post("unload_model", {"model_id": mid}).json()
    assert result(alice, runtime, unloaded) == {"model_id": mid, "type": "unload_model"}
    for fut in (created, fb):
        failed = result(alice, runtime, fut)
        assert (
            failed["category"] == "user" and "ended while waiting for a worker" in failed["error"]
        )
    described = info(alice, mid)
    assert (described["state"], described["placement"]) == ("unloaded", "never_placed")
    assert described["status_reason"].startswith(
        f"ended while waiting for a worker that reaches {SUBNET_B}"
    )
    assert alice.post("unload_model", {"model_id": mid}).json() == unloaded  # a retry
    later = alice.post("forward_backward", fwdbwd(mid, 2, [datum([1])]))
    assert later.status_code == 409

    stopping = vpc_session(alice, VPC_B)
    new_model(alice, stopping)
    assert (
        alice.post(f"sessions/{stopping}/stop").json()["state"] == "stopped"
    )  # nothing to wait for

    idle = vpc_session(alice, VPC_B)
    idle_model = new_model(alice, idle)["model_id"]
    Session.objects.filter(pk=idle).update(last_heartbeat_at=timezone.now() - timedelta(hours=1))
    assert sessions_expire_idle() == [idle]
    assert info(alice, idle_model)["placement"] == "never_placed"

    vpc = add_worker("vpc0", subnets=[SUBNET_B], security_groups=[SG_1])  # too late for them
    assert vpc.drain() == 0
    assert not TrainingModel.objects.filter(worker__name="vpc0").exists()


def test_a_restarting_worker_takes_back_what_it_held_before_waiting_models(
    alice, runtime, add_worker
) -> None:
    """A worker started again before its lease ran out: its previous process is declared dead
    as it registers, and the model it held keeps its slot (older than the one waiting) and is
    restored when it next runs something."""
    vpc = add_worker("vpc0", subnets=[SUBNET_B], security_groups=[SG_1], capacity=1)
    held = vpc_session(alice, VPC_B)
    held_model = new_model(alice, held)
    assert result(alice, vpc, held_model) == {"model_id": held_model["model_id"]}
    waiting = new_model(alice, vpc_session(alice, VPC_B))
    assert info(alice, waiting["model_id"])["placement"] == "waiting_for_capacity"

    restarted = add_worker("vpc0", subnets=[SUBNET_B], security_groups=[SG_1], capacity=1)
    moved = info(alice, held_model["model_id"])
    assert (moved["state"], moved["worker"]) == ("ready", "vpc0")
    assert info(alice, waiting["model_id"])["placement"] == "waiting_for_capacity"
    step = alice.post("forward_backward", fwdbwd(held_model["model_id"], 1, [datum([1, 2])]))
    assert "metrics" in result(alice, restarted, step.json())
    recovery = TrainingModel.objects.get(pk=held_model["model_id"]).recoveries.get()
    assert (recovery.cause, recovery.outcome, recovery.to_worker) == (
        "worker_restarted",
        "restored",
        "vpc0",
    )


def test_charlie_cannot_see_a_waiting_session_or_model(alice, charlie, runtime) -> None:
    sid = vpc_session(alice, VPC_B)
    created = new_model(alice, sid)
    mid = created["model_id"]
    assert charlie.get(f"sessions/{sid}").status_code == 404
    assert charlie.post("get_info", {"model_id": mid}).status_code == 404
    assert charlie.get(f"training_runs/{mid}").status_code == 404
    assert charlie.post("retrieve_future", {"request_id": created["request_id"]}).status_code == 404
    assert charlie.post("unload_model", {"model_id": mid}).status_code == 404
    assert charlie.post("forward_backward", fwdbwd(mid, 1, [datum([1])])).status_code == 404
    assert info(alice, mid)["placement"] == "waiting_for_network"  # untouched


def test_a_session_names_only_its_own_tenants_subnets(alice, charlie) -> None:
    r = charlie.post(
        "create_session",
        {"tags": [], "sdk_version": "t", "role_arn": charlie.role_arn, "vpc_config": VPC_B},
    )
    assert r.status_code == 400 and r.json()["field"] == "vpc_config.subnets[0]"
    assert "not registered to this account" in r.json()["detail"]
    unknown = {"subnets": [SUBNET_A, "subnet-0f0f0f0f"], "security_group_ids": [SG_1]}
    r = alice.post(
        "create_session",
        {"tags": [], "sdk_version": "t", "role_arn": alice.role_arn, "vpc_config": unknown},
    )
    assert r.status_code == 400 and r.json()["field"] == "vpc_config.subnets[1]"
    listed = [s["subnet_id"] for s in alice.get("vpc/subnets").json()["subnets"]]
    assert sorted(listed) == sorted([SUBNET_A, SUBNET_B, SUBNET_C])
    assert charlie.get("vpc/subnets").json()["subnets"] == []
