"""docs/security.md lists every documented action, so the catalogue and the docs agree."""

from __future__ import annotations

from pathlib import Path

from controlplane.iam.actions import ACTIONS

DOC = Path(__file__).resolve().parents[3] / "docs" / "security.md"


def test_every_action_is_documented() -> None:
    text = DOC.read_text()
    rows = {
        line.split("|")[1].strip().strip("`"): line.split("|")[2]
        for line in text.splitlines()
        if line.startswith("| `")
    }
    for name in ACTIONS:
        service, action = name.split(":")
        assert f"`{action}`" in rows.get(service, ""), f"{name} is missing from {DOC.name}"
