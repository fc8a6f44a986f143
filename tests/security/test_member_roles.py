"""An admin can no longer make itself owner or demote the owner, through the API or the
dashboard, on a live stack started as ``make serve`` starts it; the last owner stays one."""

from __future__ import annotations

import html

import httpx
import pytest

from .served import PASSWORD, Served, browser, csrf

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    running = Served(tmp_path_factory.mktemp("member-roles")).start()
    try:
        yield running
    finally:
        running.stop()


def _roles(served: Served, key: str) -> dict[str, str]:
    with served.client(headers={"X-API-Key": key}) as client:
        return {u["user"]: u["role"] for u in client.get("/api/v1/iam/users").json()["users"]}


def _api(client: httpx.Client, method: str, path: str, body: dict | None = None):
    """A call of the dashboard's login session (DRF asks it for the CSRF token)."""
    headers = {"X-CSRFToken": client.cookies.get("csrftoken", "")}
    return client.request(method, f"/api/v1/{path}", json=body, headers=headers)


def test_an_admin_cannot_make_an_owner_or_demote_one(served) -> None:
    alice = served.signup("alice", "127.0.0.51")
    with served.client("127.0.0.51", headers={"X-API-Key": alice["api_key"]}) as owner:
        r = owner.post("/api/v1/iam/users", json={"email": "erin@example.com", "role": "admin"})
        assert r.status_code == 201
        token = r.json()["token"]
    with served.client("127.0.0.52") as joining:
        r = joining.post(
            "/api/v1/auth/accept-invitation", json={"token": token, "password": PASSWORD}
        )
        assert r.status_code == 201 and r.json()["role"] == "admin"
    erin = browser(served, "127.0.0.52", "erin@example.com")
    try:
        r = _api(erin, "PATCH", "iam/users/erin@example.com", {"role": "owner"})
        assert r.status_code == 403 and r.json()["field"] == "role", r.text
        r = _api(erin, "PATCH", "iam/users/alice@example.com", {"role": "member"})
        assert r.status_code == 403 and "only an owner may" in r.json()["detail"]
        assert _api(erin, "DELETE", "iam/users/alice@example.com").status_code == 403
        r = _api(erin, "POST", "iam/users", {"email": "mallory@example.com", "role": "owner"})
        assert r.status_code == 403
        # the dashboard's forms: refused, and told why
        page = "/iam/users/alice@example.com"
        token = csrf(erin, page)
        r = erin.post(f"{page}/membership", data={"role": "member", "csrfmiddlewaretoken": token})
        assert r.status_code == 302
        said = html.unescape(erin.get(r.headers["location"]).text)
        assert "may not change the membership of an owner" in said
        r = erin.post(f"{page}/remove", data={"csrfmiddlewaretoken": csrf(erin, page)})
        assert "may not remove the membership of an owner" in html.unescape(
            erin.get(r.headers["location"]).text
        )
        mine = "/iam/users/erin@example.com"
        erin.post(
            f"{mine}/membership", data={"role": "owner", "csrfmiddlewaretoken": csrf(erin, mine)}
        )
    finally:
        erin.close()
    assert _roles(served, alice["api_key"]) == {
        "alice@example.com": "owner",
        "erin@example.com": "admin",
    }


def test_the_last_owner_is_never_demoted_nor_removed(served) -> None:
    bea = served.signup("bea", "127.0.0.53")
    with served.client("127.0.0.53", headers={"X-API-Key": bea["api_key"]}) as owner:
        r = owner.patch("/api/v1/iam/users/bea@example.com", json={"role": "admin"})
        assert r.status_code == 409 and "keeps at least one owner" in r.json()["detail"]
        assert owner.delete("/api/v1/iam/users/bea@example.com").status_code == 409
    assert _roles(served, bea["api_key"]) == {"bea@example.com": "owner"}
