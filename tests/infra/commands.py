"""Check that a container's command line is one this repository really runs: each is started
here, as the image would start it, in a mode that parses everything and does no work
(``--help``, gunicorn's ``--check-config``), after its modules are found."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from django.core.management import get_commands

ROOT = Path(__file__).resolve().parents[2]


def _run(argv: list[str]) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DJANGO_SETTINGS_MODULE": "controlplane.settings"}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{argv}: {done.stdout[-1500:]}{done.stderr[-1500:]}"


def _module(name: str) -> None:
    assert importlib.util.find_spec(name) is not None, f"no module {name}"


def check(command: list[str]) -> None:
    """Raise AssertionError unless ``command`` (as in a compose file, Dockerfile or pod) runs."""
    program, args = command[0], command[1:]
    if program in ("python", "python3"):
        if args[:1] == ["manage.py"]:
            assert args[1] in get_commands(), f"no management command {args[1]!r}"
            _run([sys.executable, "manage.py", *args[1:], "--help"])
        elif args[:1] == ["-m"]:
            _module(args[1])
            _run([sys.executable, "-m", *args[1:], "--help"])
        else:
            raise AssertionError(f"unknown python entry point {args}")
    elif program == "gunicorn":
        app = args[-1]
        _module(app.split(":")[0])
        if "-c" in args:
            config = args[args.index("-c") + 1]
            _module(config.removeprefix("python:"))
        _run([sys.executable, "-m", "gunicorn", *args[:-1], "--check-config", app])
    elif program == "celery":
        _module(args[args.index("-A") + 1])
        _run([sys.executable, "-m", "celery", *args, "--help"])
    else:
        raise AssertionError(f"{program!r} is not a program of this repository")
