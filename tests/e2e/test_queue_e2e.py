"""The placement queue with real processes (gunicorn, one Celery worker process with two slots,
PostgreSQL and Redis): our SDK shows a long wait and gives up at the timeout its user set while
the official tinker SDK waits its turn; the queue survives a kill -9 of the control plane; two
accounts with backlogs share the two slots' time equally."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import threading
import time
from dataclasses import dataclass
from datetime import datetime

import httpx
import pytest

from loopwright import QueueTimeoutError, ServiceClient

from .chaos import database
from .stack import ROOT, TINY, Stack

pytestmark = pytest.mark.e2e

TINKER_038 = ROOT / ".venv-tinker038" / "bin" / "python"


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    running = Stack(
        "postgres-redis",
        tmp_path_factory.mktemp("queue"),
        workers={f"q-{secrets.token_hex(3)}": ["--capacity", "2"]},
        # placement runs on every heartbeat: a freed slot is given out within 0.6 s
        env={"LOOPWRIGHT_WORKER_LEASE_SECONDS": "3"},
    ).start()
    try:
        yield running
    finally:
        running.stop()


@dataclass
class Account:
    """An account of the stack calling the API with its key."""

    stack: Stack
    name: str
    key: str
    role_arn: str
    account_id: str

    @classmethod
    def of(cls, stack: Stack, name: str) -> Account:
        if name not in stack.keys:  # a new account beside alice's and charlie's
            made = json.loads(stack.manage("create_tenant", "--name", name, "--json"))
            stack.keys[name], stack.roles[name] = made["api_key"], made["session_role_arn"]
            stack.accounts[name] = made["account_id"]
        return cls(stack, name, stack.keys[name], stack.roles[name], stack.accounts[name])

    def call(self, method: str, path: str, body: dict | None = None) -> httpx.Response:
        return httpx.request(
            method,
            f"{self.stack.url}/api/v1/{path}",
            json=body,
            headers={"X-API-Key": self.key},
            timeout=60,
        )

    def open_model(self) -> dict:
        """A session and its create_model future (not waited for)."""
        body = {"tags": [], "sdk_version": "e2e", "role_arn": self.role_arn}
        r = self.call("POST", "create_session", body)
        assert r.status_code == 200, r.text
        sid = r.json()["session_id"]
        body = {"session_id": sid, "model_seq_id": 0, "base_model": TINY}
        r = self.call("POST", "create_model", {**body, "lora_config": {"rank": 4, "seed": 1}})
        assert r.status_code == 200, r.text
        return {**r.json(), "session_id": sid}

    def created(self, fut: dict, timeout: float = 300) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = self.call("POST", "retrieve_future", {"request_id": fut["request_id"]})
            if r.status_code == 200:
                assert r.json() == {"model_id": fut["model_id"]}, r.text
                return r.json()
            assert r.status_code == 408, r.text
        raise AssertionError(f"{fut['model_id']} was not created in {timeout} s")

    def queue(self, model_id: str) -> dict | None:
        r = self.call("POST", "get_info", {"model_id": model_id})
        assert r.status_code == 200, r.text
        return r.json()["queue"]

    def stop(self, session_id: str) -> None:
        assert self.call("POST", f"sessions/{session_id}/stop").status_code == 200


def until(check, timeout: float = 120, every: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(every)
    raise AssertionError(f"not within {timeout} s")


def up(stack: Stack) -> bool:
    try:
        return httpx.get(f"{stack.url}/api/v1/healthz", timeout=5).status_code == 200
    except httpx.TransportError:
        return False


def model_rows(stack: Stack, account_id: str) -> list[tuple[str, datetime | None, datetime | None]]:
    """(id, placed_at, ended_at) of every model of the account, oldest first."""
    with database(stack) as conn:
        return conn.execute(
            "SELECT m.id, m.placed_at, m.ended_at FROM training_sessions_trainingmodel m "
            "JOIN tenants_tenant t ON t.id = m.tenant_id WHERE t.account_id = %s "
            "ORDER BY m.created_at",
            [account_id],
        ).fetchall()


def test_our_sdk_gives_up_at_its_timeout_while_the_official_sdk_waits_its_turn(
    stack, capfd
) -> None:
    alice, charlie = Account.of(stack, "alice"), Account.of(stack, "charlie")
    holders = [alice.open_model() for _ in range(2)]
    for fut in holders:
        alice.created(fut)  # alice holds both slots

    # our SDK, with a limit: it waits, shows where, gives up and leaves the queue
    with ServiceClient(stack.url, alice.key, role_arn=alice.role_arn, queue_timeout=4) as service:
        started = time.monotonic()
        with pytest.raises(QueueTimeoutError) as raised:
            service.create_lora_training_client(TINY, rank=4)
        assert 4 <= time.monotonic() - started < 30
    status = raised.value.status
    assert (status.position, status.waits_for, status.base_model) == (1, "capacity", TINY)
    gave_up = alice.call("GET", "sessions?limit=1").json()["session_infos"][0]
    assert gave_up["state"] == "stopped"
    assert gave_up["models"][0]["placement"] == "never_placed"

    # the official tinker SDK (0.38, a process of its own, as charlie) waits in line
    if not TINKER_038.exists():
        pytest.skip("tinker 0.38 is not installed (make tinker-venv)")
    script = (
        "import sys, tinker; svc = tinker.ServiceClient(base_url=sys.argv[1]); "
        f"tc = svc.create_lora_training_client(base_model={TINY!r}, rank=4); print(tc.model_id)"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "DJANGO"))}
    tinker = subprocess.Popen(
        [TINKER_038, "-c", script, stack.url],
        env=env | {"TINKER_API_KEY": stack.role_key("charlie"), "HF_HUB_OFFLINE": "1"},
        cwd="/",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # and our SDK again, without a limit, behind it
    got: dict = {}
    service = ServiceClient(stack.url, alice.key, role_arn=alice.role_arn)

    def create() -> None:
        got["client"] = service.create_lora_training_client(TINY, rank=4)

    waiting = threading.Thread(target=create)
    try:
        charlies_model = until(
            lambda: [
                m
                for s in charlie.call("GET", "sessions").json()["session_infos"]
                for m in s["model_ids"]
            ]
        )[0]
        waiting.start()
        # charlie holds no slot and had none: his model is first, alice's second
        assert until(lambda: charlie.queue(charlies_model))["position"] == 1
        alices = until(
            lambda: [
                s
                for s in alice.call("GET", "sessions").json()["session_infos"]
                if s["state"] == "pending" and s["queue"]
            ]
        )
        assert alices[0]["queue"]["position"] == 2
        time.sleep(4)  # a long wait: our SDK shows it
        alice.stop(holders[0]["session_id"])
        out, err = tinker.communicate(timeout=300)
        assert tinker.returncode == 0, err[-3000:]
        assert out.strip() == charlies_model  # its create future ended as soon as it was placed
        alice.stop(holders[1]["session_id"])
        waiting.join(timeout=300)
        assert got["client"].model_id == alices[0]["model_ids"][0]
        shown = capfd.readouterr().err
        assert f"model on {TINY}: queued" in shown and f"in line for a slot of {TINY}" in shown
    finally:
        if tinker.poll() is None:
            tinker.kill()
        service.close()
        waiting.join(timeout=60)
        for s in charlie.call("GET", "sessions").json()["session_infos"]:
            charlie.stop(s["session_id"])


def test_the_queue_survives_a_kill_9_of_the_control_plane(stack) -> None:
    erin = Account.of(stack, "erin")
    holders = [erin.open_model() for _ in range(2)]
    for fut in holders:
        erin.created(fut)
    queued = [erin.open_model() for _ in range(3)]
    before = [erin.queue(fut["model_id"]) for fut in queued]
    assert [q["position"] for q in before] == [1, 2, 3]

    stack.kill_http()  # kill -9 of gunicorn and its workers
    stack.start_http()
    until(lambda: up(stack))

    # the same places in line, since the same moment: the queue is in the database
    after = [erin.queue(fut["model_id"]) for fut in queued]
    shown = ("position", "waiting", "waits_for", "queued_at", "reason")
    assert [{k: q[k] for k in shown} for q in after] == [{k: q[k] for k in shown} for q in before]
    for fut, place in zip(queued, after, strict=True):
        r = erin.call("POST", "retrieve_future", {"request_id": fut["request_id"]})
        assert r.status_code == 408 and r.json()["queue"]["position"] == place["position"]
    # the slots free one by one: the models are placed in the queue's order, and their
    # create futures (made before the kill) end
    erin.stop(holders[0]["session_id"])
    erin.created(queued[0])
    assert [erin.queue(f["model_id"])["position"] for f in queued[1:]] == [1, 2]
    erin.stop(holders[1]["session_id"])
    erin.created(queued[1])
    assert erin.queue(queued[2]["model_id"])["position"] == 1
    erin.stop(queued[0]["session_id"])
    erin.created(queued[2])
    for fut in queued:
        erin.stop(fut["session_id"])


def test_two_accounts_share_the_slots_time_equally(stack) -> None:
    """frank's sessions hold a slot three times as long as gina's; frank's backlog arrives
    first and takes both slots: while both wait, each holds half the slot time (±10 %)."""
    frank, gina = Account.of(stack, "frank"), Account.of(stack, "gina")
    for who in (frank, gina):
        stack.manage("set_quota", "--account", who.account_id, "--concurrent-sessions", "50")
    errors: list[BaseException] = []

    def session(who: Account, seconds: float) -> None:
        try:
            fut = who.open_model()
            who.created(fut, timeout=600)
            time.sleep(seconds)  # the user's loop trains for a while
            who.stop(fut["session_id"])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=session, args=(frank, 3.0)) for _ in range(6)]
    threads += [threading.Thread(target=session, args=(gina, 1.0)) for _ in range(18)]
    for i, t in enumerate(threads):
        t.start()
        if i == 5:
            time.sleep(1)  # frank's are in first
    for t in threads:
        t.join(timeout=900)
    assert not errors, errors
    assert not [t for t in threads if t.is_alive()], "a session did not end within 900 s"

    def all_ended():
        # a stopped model ends when its worker has unloaded it, a moment after the stop answers
        rows = {who.name: model_rows(stack, who.account_id) for who in (frank, gina)}
        return all(placed and ended for r in rows.values() for _, placed, ended in r) and rows

    rows = until(all_ended)
    # while both waited: from gina's first model joining the queue to the placement of the
    # last model of whichever backlog ran out first
    with database(stack) as conn:
        start = conn.execute(
            "SELECT min(m.created_at) FROM training_sessions_trainingmodel m "
            "JOIN tenants_tenant t ON t.id = m.tenant_id WHERE t.account_id = %s",
            [gina.account_id],
        ).fetchone()[0]
    end = min(max(placed for _, placed, _ in r) for r in rows.values())
    held = {
        name: sum(
            max((min(ended, end) - max(placed, start)).total_seconds(), 0.0)
            for _, placed, ended in r
        )
        for name, r in rows.items()
    }
    total = sum(held.values())
    assert total > 10, held  # a contest long enough to measure
    assert 0.4 <= held["frank"] / total <= 0.6, held
