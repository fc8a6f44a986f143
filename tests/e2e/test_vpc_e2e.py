"""VPC placement end to end: two real worker processes reaching different subnets (PostgreSQL +
Redis + gunicorn); a session's work runs on the worker its vpc_config names, and a session
naming a subnet neither reaches waits with the reason."""

from __future__ import annotations

import secrets

import httpx
import pytest

from loopwright import ServiceClient
from loopwright.types import AdamParams

from .stack import TINY, Stack
from .test_sessions_e2e import sft_datums

pytestmark = pytest.mark.e2e

SUBNET_A, SUBNET_B, SUBNET_C = "subnet-0aaa0aaa", "subnet-0bbb0bbb", "subnet-0ccc0ccc"
SG = "sg-0e2e0e2e"


@pytest.fixture(scope="module")
def vpc_stack(tmp_path_factory):
    suffix = secrets.token_hex(3)
    workers = {
        f"vpc-a-{suffix}": ["--subnet", SUBNET_A, "--security-group", SG],
        f"vpc-b-{suffix}": ["--subnet", SUBNET_B, "--security-group", SG],
    }
    stack = Stack("postgres-redis", tmp_path_factory.mktemp("vpc"), workers=workers).start()
    # the operator registers alice's subnets, as when connecting workers to her VPC
    subnets = [arg for s in (SUBNET_A, SUBNET_B, SUBNET_C) for arg in ("--add", s)]
    stack.manage("vpc_subnets", "--account", stack.accounts["alice"], *subnets)
    try:
        yield stack
    finally:
        stack.stop()


def describe(stack: Stack, session_id: str) -> dict:
    r = httpx.get(
        f"{stack.url}/api/v1/sessions/{session_id}",
        headers={"X-API-Key": stack.keys["alice"]},
        timeout=10,
    )
    assert r.status_code == 200, r.text
    return r.json()


def service(stack: Stack, subnet: str) -> ServiceClient:
    return ServiceClient(
        base_url=stack.url,
        api_key=stack.keys["alice"],
        role_arn=stack.roles["alice"],
        vpc_config={"subnets": [subnet], "security_group_ids": [SG]},
    )


def test_work_runs_on_the_worker_of_its_subnet_and_unreachable_subnets_wait(vpc_stack) -> None:
    worker_a, worker_b = list(vpc_stack.workers)
    with service(vpc_stack, SUBNET_B) as svc:
        tc = svc.create_lora_training_client(TINY, rank=4, seed=0)  # waits until B takes it
        data = sft_datums(tc.get_tokenizer())
        fb = tc.forward_backward(data, loss_fn="cross_entropy")
        step = tc.optim_step(AdamParams(learning_rate=1e-2))
        assert fb.result().metrics["loss:sum"] > 0 and step.result().metrics
        session = describe(vpc_stack, tc.session_id)
        assert session["placement"] == "placed"
        assert [(m["model_id"], m["worker"]) for m in session["models"]] == [
            (tc.model_id, worker_b)
        ]
    with service(vpc_stack, SUBNET_A) as svc:
        other = svc.create_lora_training_client(TINY, rank=4, seed=0)
        assert describe(vpc_stack, other.session_id)["models"][0]["worker"] == worker_a

    # both workers are up; neither reaches subnet C: the model is accepted and waits
    headers = {"X-API-Key": vpc_stack.keys["alice"]}
    with httpx.Client(base_url=f"{vpc_stack.url}/api/v1", headers=headers, timeout=30) as http:
        sid = http.post(
            "/create_session",
            json={
                "tags": [],
                "sdk_version": "e2e",
                "role_arn": vpc_stack.roles["alice"],
                "vpc_config": {"subnets": [SUBNET_C], "security_group_ids": [SG]},
            },
        ).json()["session_id"]
        created = http.post(
            "/create_model", json={"session_id": sid, "model_seq_id": 0, "base_model": TINY}
        )
        assert created.status_code == 200, created.text
        reason = (
            f"waiting for a worker that reaches {SUBNET_C} with {SG}: "
            f"2 workers serve {TINY}, none reaches these subnets"
        )
        waiting = describe(vpc_stack, sid)
        assert (waiting["placement"], waiting["status_reason"]) == ("waiting_for_network", reason)
        assert waiting["models"][0]["worker"] is None
        assert http.post(f"/sessions/{sid}/stop").json()["state"] == "stopped"
