"""sessions/<id>/finish, sessions/search and what sessions/<id> reports besides (billable tokens,
the last seq_id received, Blocked with its reason); charlie gets 404 for alice's sessions."""

from __future__ import annotations

import pytest

from tests.support.wire import create_model, datum, fwdbwd, open_session, result

pytestmark = pytest.mark.django_db


def test_finish_keeps_the_first_reason_and_stops_the_session(alice, charlie, runtime):
    session = open_session(alice)
    create_model(alice, runtime, session)
    assert (
        charlie.post(f"sessions/{session}/finish", {"reason": {"type": "success"}}).status_code
        == 404
    )
    r = alice.post(f"sessions/{session}/finish", {"reason": {"type": "nope"}})
    assert r.status_code == 400 and r.json()["field"] == "reason.type"
    r = alice.post(f"sessions/{session}/finish", {"reason": {"type": "errored"}, "detail": "OOM"})
    assert r.status_code == 200, r.content
    assert r.json()["status"] == {
        "type": "client_finished",
        "reason": {"type": "errored"},
        "detail": "OOM",
    }
    again = alice.post(f"sessions/{session}/finish", {"reason": {"type": "success"}})
    assert again.json()["status"]["reason"] == {"type": "errored"}  # first wins
    runtime.drain()
    assert alice.get(f"sessions/{session}").json()["state"] in ("stopping", "stopped")


def test_search_filters_pages_and_stays_in_the_tenant(alice, charlie, runtime):
    made = []
    for i in range(3):
        r = alice.post(
            "create_session",
            {
                "tags": [],
                "sdk_version": "t",
                "role_arn": alice.role_arn,
                "display_name": f"Run number {i}",
                "user_metadata": {"team": "a" if i < 2 else "b"},
            },
        )
        made.append(r.json()["session_id"])
    alice.post(f"sessions/{made[0]}/finish", {"reason": {"type": "success"}})
    found = alice.post("sessions/search", {"user_metadata": {"team": "a"}}).json()
    assert [s["session_id"] for s in found["sessions"]] == [made[1], made[0]]
    assert found["sessions"][0]["display_name"] == "Run number 1"
    page = alice.post("sessions/search", {"limit": 2}).json()
    assert len(page["sessions"]) == 2 and page["next_cursor"] is not None
    rest = alice.post("sessions/search", {"limit": 2, "cursor": page["next_cursor"]}).json()
    assert [s["session_id"] for s in rest["sessions"]] == [made[0]] and rest["next_cursor"] is None
    finished = alice.post(
        "sessions/search",
        {"statuses": [{"type": "client_finished", "reasons": ["success"]}]},
    ).json()
    assert [s["session_id"] for s in finished["sessions"]] == [made[0]]
    named = alice.post("sessions/search", {"display_name": "number 2"}).json()
    assert [s["session_id"] for s in named["sessions"]] == [made[2]]
    assert charlie.post("sessions/search", {}).json()["sessions"] == []
    assert charlie.post("sessions/search", {"session_id": made[0]}).json()["sessions"] == []
    r = alice.post("sessions/search", {"limit": 500})
    assert r.status_code == 400 and r.json()["field"] == "limit"
    r = alice.post("sessions/search", {"project_ids": ["elsewhere"]})
    assert r.status_code == 400 and r.json()["field"] == "project_ids"


def test_detail_reports_tokens_last_seq_id_and_a_block(alice, charlie, runtime):
    session = open_session(alice)
    model = create_model(alice, runtime, session)
    ok = alice.post("forward_backward", fwdbwd(model, 1, [datum([1, 2, 3, 4])]))
    result(alice, runtime, ok.json())
    detail = alice.get(f"sessions/{session}").json()
    assert detail["TrainingSessionStatus"] == "InProgress" and detail["BlockedReason"] is None
    assert detail["BillableTokenUsage"]["TrainingTokens"] == 4
    assert detail["LastReceivedSequenceNumber"] == 1
    # seq_id 2 never comes; 3 waits behind it
    alice.post("forward_backward", fwdbwd(model, 3, [datum([1, 2, 3])]))
    runtime.drain()
    detail = alice.get(f"sessions/{session}").json()
    assert detail["TrainingSessionStatus"] == "Blocked"
    assert "seq_id 2" in detail["BlockedReason"] and detail["LastReceivedSequenceNumber"] == 3
    assert charlie.get(f"sessions/{session}").status_code == 404
