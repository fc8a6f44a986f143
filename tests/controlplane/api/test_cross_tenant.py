"""charlie (another tenant) gets 404 for everything of alice's, on every route of the API.

Every route of ``controlplane.api.urls`` must appear in ``PROBES`` (or in ``NOT_TENANT_SCOPED``
with the reason), so a new endpoint cannot ship without its cross-tenant check.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest

from controlplane.anthropic_api.urls import urlpatterns as anthropic_urlpatterns
from controlplane.api.urls import urlpatterns
from tests.support.callers import Person
from tests.support.tiny_worker import TINY
from tests.support.wire import create_model, datum, fwdbwd, open_session

pytestmark = pytest.mark.django_db

# Routes that take no identifier of a tenant's resource: lists are checked for leaks below.
NOT_TENANT_SCOPED = {
    "healthz": "public",
    "schema": "public: the OpenAPI document",
    "docs": "public: the OpenAPI document's page",
    "client/config": "service-wide",
    "client/dynamic_config": "service-wide",
    "sessions/search": "search of the caller's own account: leaks checked in test_session_reports",
    "checkpoints/search": "search of the caller's own account: test_checkpoint_search",
    "registry/signed-downloads": "a bearer link made for alice; forged: 404 "
    "(test_external_weights)",
    "registry/signed-uploads": "a bearer link made for alice; forged: 404 (test_external_upload)",
    "external_weights_upload_start": "creates in the caller's own tenant",
    "get_server_capabilities": "service-wide",
    "telemetry": "write-only",
    "base_models": "service-wide catalogue",
    "base_models/tokenizer": "service-wide catalogue",
    "create_session": "creates in the caller's own tenant",
    "sessions": "list: checked for leaks",
    "training_runs": "list: checked for leaks",
    "auth/signup": "creates a new tenant",
    "auth/login": "credentials",
    "auth/logout": "the caller's own login",
    "auth/accept-invitation": "token: tested in test_api_iam",
    "auth/whoami": "the caller",
    "iam/users": "list: checked for leaks",
    "iam/api-keys": "list: checked for leaks",
    "iam/access-keys": "list: checked for leaks",
    "iam/roles": "list (role names are per tenant): checked for leaks",
    "audit/events": "list: checked for leaks",
    "billing/usage": "report of the caller's account: checked for leaks",
    "billing/invoice-preview": "the caller's account: checked for leaks",
    "billing/reconciliation": "the caller's account: checked for leaks",
    "kms/keys": "list: checked for leaks",
    "vpc/subnets": "list: checked for leaks",
    "storage/locations": "list: checked for leaks",
    "registry/model-package-groups": "list: checked for leaks; create is in the caller's tenant",
    "billing/usage/events": "report of the caller's account: checked for leaks",
    "billing/usage/checkpoints/current": "the caller's account: checked for leaks",
    "billing/budgets": "list: checked for leaks; create is in the caller's tenant (a scope "
    "naming alice's key or session: test_budgets_api)",
}


@pytest.fixture
def world(alice: Person, runtime) -> dict:
    session_id = open_session(alice)
    model_id = create_model(alice, runtime, session_id)
    r = alice.post("save_weights_for_sampler", {"model_id": model_id, "seq_id": 1, "path": "s1"})
    save = r.json()
    runtime.drain()
    path = alice.post("retrieve_future", {"request_id": save["request_id"]}).json()["path"]
    sampler = alice.post(
        "create_sampling_session",
        {"session_id": session_id, "sampling_session_seq_id": 0, "model_path": path},
    ).json()["sampling_session_id"]
    r = alice.post(
        "asample",
        {
            "sampling_session_id": sampler,
            "prompt": {"chunks": [{"type": "encoded_text", "tokens": [1, 2, 3]}]},
            "sampling_params": {"max_tokens": 2},
        },
    )
    assert r.status_code == 200, r.content
    runtime.drain()  # alice has usage to report
    alice.post("iam/roles", {"name": "secret-role"})
    key = alice.post("iam/api-keys", {"name": "k"}).json()["prefix"]
    access_key = alice.post("iam/access-keys", {"name": "k"}).json()["access_key_id"]
    kms_key = alice.post("kms/keys", {"description": "alice's"}).json()
    r = alice.post("registry/model-package-groups", {"name": "alice-models"})
    assert r.status_code == 201, r.content
    cap = {"name": "alice-cap", "scope": "api_key", "scope_value": key, "unit": "usd"}
    r = alice.post("billing/budgets", cap | {"period": "month", "amount": "5"})
    assert r.status_code == 201, r.content
    upload = alice.post(
        "external_weights_upload_start", {"base_model": TINY, "lora_config": {"rank": 4}}
    ).json()["upload_id"]
    return {
        "upload": upload,
        "session": session_id,
        "model": model_id,
        "path": path,
        "sampler": sampler,
        "request": save["request_id"],
        "key": key,
        "access_key": access_key,
        "kms": kms_key.get("key_id") or kms_key.get("id"),
        "kms_arn": kms_key.get("arn"),
        "account": alice.tenant.account_id,
        "group": f"run-{model_id}",  # where the save above was registered, as version 1
        "named_group": "alice-models",
    }


def probes(w: dict) -> dict[str, list[tuple[str, str, dict | None]]]:
    """route → (method, concrete path, JSON body) that name alice's things."""
    m, s = w["model"], w["session"]
    return {
        "session_heartbeat": [("post", "session_heartbeat", {"session_id": s})],
        "sessions/<str:session_id>": [("get", f"sessions/{s}", None)],
        "sessions/<str:session_id>/stop": [("post", f"sessions/{s}/stop", {})],
        "sessions/<str:session_id>/usage": [("get", f"sessions/{s}/usage", None)],
        "sessions/<str:session_id>/finish": [
            ("post", f"sessions/{s}/finish", {"reason": {"type": "success"}})
        ],
        "external_weights_upload_finish": [
            ("post", "external_weights_upload_finish", {"upload_id": w["upload"]})
        ],
        "save_weights_external": [
            ("post", "save_weights_external", {"model_id": m, "seq_id": 2, "path": "x"})
        ],
        "training_runs/<str:model_id>/checkpoints/<path:checkpoint_id>/external_weights_urls": [
            (
                "get",
                f"training_runs/{m}/checkpoints/sampler_weights/s1/external_weights_urls",
                None,
            ),
            (
                "get",
                f"training_runs/{m}/checkpoints/external_weights/s1/external_weights_urls",
                None,
            ),
        ],
        "copy_weights": [
            (
                "post",
                "copy_weights",
                {"source_path": w["path"], "destination_project_id": "default"},
            ),
            (
                "post",
                "copy_weights",
                {"source_path": w["path"], "session_id": s, "model_seq_id": 7},
            ),
        ],
        "create_model": [
            ("post", "create_model", {"session_id": s, "model_seq_id": 5, "base_model": TINY})
        ],
        "get_info": [("post", "get_info", {"model_id": m})],
        "unload_model": [("post", "unload_model", {"model_id": m})],
        "weights_info": [("post", "weights_info", {"tinker_path": w["path"]})],
        "training_runs/<str:model_id>": [("get", f"training_runs/{m}", None)],
        "training_runs/<str:model_id>/checkpoints": [
            ("get", f"training_runs/{m}/checkpoints", None)
        ],
        "forward": [
            (
                "post",
                "forward",
                {
                    "model_id": m,
                    "seq_id": 2,
                    "forward_input": {"data": [datum([1, 2])], "loss_fn": "cross_entropy"},
                },
            )
        ],
        "forward_backward": [("post", "forward_backward", fwdbwd(m, 2, [datum([1, 2])]))],
        "optim_step": [
            (
                "post",
                "optim_step",
                {"model_id": m, "seq_id": 2, "adam_params": {"learning_rate": 0.1}},
            )
        ],
        "save_weights": [("post", "save_weights", {"model_id": m, "seq_id": 2, "path": "x"})],
        "save_weights_for_sampler": [
            ("post", "save_weights_for_sampler", {"model_id": m, "seq_id": 2, "path": "y"})
        ],
        "load_weights": [
            (
                "post",
                "load_weights",
                {"model_id": m, "seq_id": 2, "path": w["path"], "optimizer": False},
            )
        ],
        "create_sampling_session": [
            (
                "post",
                "create_sampling_session",
                {"session_id": s, "sampling_session_seq_id": 9, "model_path": w["path"]},
            )
        ],
        "asample": [
            (
                "post",
                "asample",
                {
                    "sampling_session_id": w["sampler"],
                    "prompt": {"chunks": [{"type": "encoded_text", "tokens": [1]}]},
                    "sampling_params": {"max_tokens": 2},
                },
            )
        ],
        "samplers/<str:sampler_id>": [("get", f"samplers/{w['sampler']}", None)],
        "retrieve_future": [("post", "retrieve_future", {"request_id": w["request"]})],
        "iam/users/<str:username>": [
            ("get", "iam/users/alice@example.com", None),
            ("patch", "iam/users/alice@example.com", {"role": "member"}),
            ("delete", "iam/users/alice@example.com", None),
        ],
        "iam/users/<str:username>/policies/<str:policy_name>": [
            (
                "put",
                "iam/users/alice@example.com/policies/p",
                {
                    "document": {
                        "Version": "2012-10-17",
                        "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
                    }
                },
            ),
        ],
        "iam/api-keys/<str:prefix>/revoke": [("post", f"iam/api-keys/{w['key']}/revoke", {})],
        "iam/access-keys/<str:access_key_id>/revoke": [
            ("post", f"iam/access-keys/{w['access_key']}/revoke", {})
        ],
        "iam/roles/<str:name>": [
            ("get", "iam/roles/secret-role", None),
            ("delete", "iam/roles/secret-role", None),
        ],
        "iam/roles/<str:name>/trust-policy": [
            ("put", "iam/roles/secret-role/trust-policy", {"trust_policy": {}})
        ],
        "iam/roles/<str:name>/policies": [("get", "iam/roles/secret-role/policies", None)],
        "iam/roles/<str:name>/policies/<str:policy_name>": [
            ("get", "iam/roles/secret-role/policies/sessions", None)
        ],
        "kms/keys/<path:key_id>": [
            ("get", f"kms/keys/{w['kms']}", None),
            ("get", f"kms/keys/{w['kms_arn']}", None),
        ],
        "kms/keys/<path:key_id>/disable": [("post", f"kms/keys/{w['kms']}/disable", {})],
        "kms/keys/<path:key_id>/enable": [("post", f"kms/keys/{w['kms']}/enable", {})],
        "kms/keys/<path:key_id>/schedule-deletion": [
            ("post", f"kms/keys/{w['kms']}/schedule-deletion", {})
        ],
        "kms/keys/<path:key_id>/cancel-deletion": [
            ("post", f"kms/keys/{w['kms']}/cancel-deletion", {})
        ],
        "kms/keys/<path:key_id>/rotate": [("post", f"kms/keys/{w['kms']}/rotate", {})],
        "billing/budgets/<str:name>": [
            ("get", "billing/budgets/alice-cap", None),
            ("patch", "billing/budgets/alice-cap", {"amount": "1"}),
            ("delete", "billing/budgets/alice-cap", None),
        ],
        "training_runs/<str:model_id>/checkpoints/<path:checkpoint_id>/ttl": [
            ("put", f"training_runs/{m}/checkpoints/sampler_weights/s1/ttl", {"ttl_seconds": 3600}),
            ("put", f"training_runs/{m}/checkpoints/sampler_weights/s1/ttl", {"ttl_seconds": None}),
        ],
        **registry_probes(w),
    }


def registry_probes(w: dict) -> dict[str, list[tuple[str, str, dict | None]]]:
    groups = "registry/model-package-groups"
    g, named = w["group"], w["named_group"]
    version_arn = f"arn:loopwright:registry::{w['account']}:model-package/{g}/1"
    return {
        f"{groups}/<str:name>": [
            ("get", f"{groups}/{g}", None),
            ("get", f"{groups}/{named}", None),
            ("delete", f"{groups}/{g}?force=true", None),
            ("delete", f"{groups}/{named}", None),
        ],
        f"{groups}/<str:name>/versions": [
            ("get", f"{groups}/{g}/versions", None),
            ("get", f"{groups}/{named}/versions", None),
        ],
        f"{groups}/<str:name>/retention": [
            ("get", f"{groups}/{g}/retention", None),
            ("put", f"{groups}/{named}/retention", {"keep_last": 1}),
            ("delete", f"{groups}/{g}/retention", None),
        ],
        f"{groups}/<str:name>/versions/<int:version>": [
            ("get", f"{groups}/{g}/versions/1", None),
            ("patch", f"{groups}/{g}/versions/1", {"approval_status": "Approved"}),
            ("delete", f"{groups}/{g}/versions/1", None),
        ],
        "registry/model-packages/by-path": [
            ("get", f"registry/model-packages/by-path?path={quote(w['path'], safe='')}", None),
            ("get", f"registry/model-packages/by-path?path={quote(version_arn, safe='')}", None),
        ],
        f"{groups}/<str:name>/versions/<int:version>/download": [
            ("get", f"{groups}/{g}/versions/1/download", None),
            ("get", f"{groups}/{g}/versions/1/download?format=merged", None),
        ],
        "registry/model-packages/download": [
            ("get", f"registry/model-packages/download?path={quote(w['path'], safe='')}", None),
            (
                "get",
                f"registry/model-packages/download?path={quote(version_arn, safe='')}&format=adapter",
                None,
            ),
        ],
    }


def test_every_route_is_covered(world) -> None:
    routes = {str(p.pattern) for p in urlpatterns}
    covered = set(probes(world)) | set(NOT_TENANT_SCOPED)
    assert routes <= covered, f"add a cross-tenant probe for {sorted(routes - covered)}"


def test_charlie_gets_404_for_everything_of_alices(world, alice: Person, charlie: Person) -> None:
    for route, calls in probes(world).items():
        for method, path, body in calls:
            r = getattr(charlie.client, method)(f"/api/v1/{path}", body, format="json")
            assert r.status_code == 404, (route, method, r.status_code, r.content)
    # and alice's things are untouched
    assert alice.get(f"sessions/{world['session']}").json()["state"] == "active"
    assert alice.get("iam/roles/secret-role").status_code == 200
    version = alice.get(f"registry/model-package-groups/{world['group']}/versions/1").json()
    assert version["approval_status"] == "PendingManualApproval", version
    assert alice.get(f"registry/model-package-groups/{world['named_group']}").status_code == 200
    assert alice.get("billing/budgets/alice-cap").json()["amount"] == "5.000000"
    ttl = alice.get(f"training_runs/{world['model']}/checkpoints").json()["checkpoints"][0]
    assert ttl["expires_at"] is None, ttl
    assert (
        alice.get(f"registry/model-package-groups/{world['named_group']}/retention").json()[
            "keep_last"
        ]
        is None
    )


def test_charlies_lists_show_nothing_of_alices(world, charlie: Person) -> None:
    for path in (
        "sessions",
        "training_runs",
        "iam/users",
        "iam/api-keys",
        "iam/access-keys",
        "iam/roles",
        "audit/events",
        "kms/keys",
        "vpc/subnets",
        "storage/locations",
        "registry/model-package-groups",
        "billing/usage?group_by=day,session,base_model,meter",
        "billing/usage?group_by=session&format=csv",
        "billing/invoice-preview",
        "billing/reconciliation",
        "billing/budgets",
        f"billing/usage?api_key={world['key']}&group_by=api_key,session",
        "billing/usage/checkpoints/current",
        "billing/usage/events?starting_on={}&ending_before={}".format(*_today()),
    ):
        r = charlie.get(path)
        assert r.status_code == 200, (path, r.content)
        text = r.content.decode()
        for value in (
            world["session"],
            world["model"],
            world["key"],
            world["access_key"],
            "secret-role",
            "alice@example.com",
            world["account"],
            world["group"],
            world["named_group"],
        ):
            assert value not in text, (path, value)


def _today() -> tuple[str, str]:
    from datetime import UTC, datetime, timedelta

    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    start = now - timedelta(days=1)
    return start.strftime("%Y-%m-%dT%H:%M:%SZ"), now.strftime("%Y-%m-%dT%H:%M:%SZ")


def anthropic_probes(w: dict) -> dict[str, list[dict]]:
    """route of Anthropic's Messages face (under /v1/) → bodies naming alice's models."""
    version_arn = f"arn:loopwright:registry::{w['account']}:model-package/{w['group']}/1"
    names = [w["session"], w["model"], w["path"], w["sampler"], version_arn]
    hi = [{"role": "user", "content": "hi"}]
    return {
        "messages": [{"model": n, "max_tokens": 4, "messages": hi} for n in names]
        + [{"model": w["model"], "max_tokens": 4, "messages": hi, "stream": True}],
        "messages/count_tokens": [{"model": n, "messages": hi} for n in names],
    }


def test_charlie_gets_anthropics_404_for_every_name_of_alices(
    world, alice: Person, charlie: Person
) -> None:
    probes = anthropic_probes(world)
    routes = {str(p.pattern) for p in anthropic_urlpatterns}
    assert routes == set(probes), "add a cross-tenant probe for each route"
    hi = [{"role": "user", "content": "hi"}]
    unknown = {"model": "sampler-never-made", "max_tokens": 4, "messages": hi}
    nobody = charlie.client.post("/v1/messages", unknown, format="json").json()
    for route, bodies in probes.items():
        for body in bodies:
            r = charlie.client.post(f"/v1/{route}", body, format="json")
            assert r.status_code == 404, (route, body["model"], r.content)
            error = r.json()["error"]
            assert error["type"] == "not_found_error" == nobody["error"]["type"]
            # worded as for a name that never existed
            assert error["message"] == nobody["error"]["message"].replace(
                "sampler-never-made", body["model"]
            )
    assert alice.get(f"samplers/{world['sampler']}").status_code == 200
