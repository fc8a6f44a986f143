"""The control-plane project boots: system checks pass and /api/v1/healthz answers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_system_checks_and_healthz(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "LOOPWRIGHT_DATA_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
    }
    check = subprocess.run(
        [sys.executable, "manage.py", "check", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stderr
    script = (
        "import django; django.setup();"
        "from django.test import Client;"
        "r = Client().get('/api/v1/healthz');"
        "print(r.status_code, r.content.decode())"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.stdout.strip() == '200 {"status":"ok"}', out.stderr
    assert subprocess.run(
        [sys.executable, "-c", script.replace("healthz", "nope")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    ).stdout.startswith("404")
