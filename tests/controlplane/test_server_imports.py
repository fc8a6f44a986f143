"""The control plane and the dashboard load without the worker's libraries: every one of their
modules imports in a process where torch, transformers and peft cannot be imported. (The
``server`` extra installs transformers, without torch, for the /v1 endpoints' tokenizers; it is
imported when a request first needs one, not when a process starts.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import importlib, importlib.abc, pkgutil, sys

WORKER_ONLY = ("torch", "transformers", "peft")


class WorkerOnly(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in WORKER_ONLY:
            raise ModuleNotFoundError(f"{name} is the worker's (blocked in this test)", name=name)
        return None


sys.meta_path.insert(0, WorkerOnly())
import django

django.setup()
failed = []
for package in ("controlplane", "web"):
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, package + "."):
        try:
            importlib.import_module(info.name)
        except Exception as e:
            failed.append(f"{info.name}: {type(e).__name__}: {e}")
print("\\n".join(failed) or "ok")
"""


def test_every_control_plane_module_imports_without_the_worker_libraries(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "LOOPWRIGHT_DATA_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
    }
    for name in ("DATABASE_URL", "PROMETHEUS_MULTIPROC_DIR"):
        env.pop(name, None)  # importing touches no database and keeps metrics in memory
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "ok", out.stdout
