"""Run the whole service on one machine: control plane, GPU worker(s), housekeeping.

Embedded default: SQLite and a filesystem broker under LOOPWRIGHT_DATA_DIR, no other server; its
secrets are made there on first start (controlplane/install_secrets.py). Prints the local API key
and session role (kept in <data dir>/api-key and role-arn) and the URL.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

from controlplane.housekeeping.janitor import run_forever
from controlplane.iam.provisioning import account_create
from controlplane.install_secrets import LEGACY_SECRET_KEY
from controlplane.kms.keyring import MasterKey
from controlplane.kms.master_rotation import master_key_rewrap
from controlplane.kms.providers import master_key

DEFAULT_WORKERS = ["HuggingFaceTB/SmolLM2-135M-Instruct", "loopwright/tiny-byte-llama"]


class Command(BaseCommand):
    help = "Start the control plane and workers on this machine (Ctrl-C stops everything)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--host", default=os.environ.get("LOOPWRIGHT_HOST", "127.0.0.1"))
        parser.add_argument(
            "--port", type=int, default=int(os.environ.get("LOOPWRIGHT_PORT", "8000"))
        )
        parser.add_argument(
            "--base-model",
            action="append",
            dest="base_models",
            help="a base model to serve (repeatable); default: SmolLM2-135M-Instruct and the tiny model",
        )
        parser.add_argument("--device", default=os.environ.get("LOOPWRIGHT_WORKER_DEVICE", "cpu"))
        parser.add_argument(
            "--threads", type=int, default=64, help="HTTP threads (long polls hold one each)"
        )

    def handle(self, *args, **opts) -> None:
        settings.DATA_DIR.mkdir(parents=True, exist_ok=True)
        call_command("migrate", verbosity=0)
        # Data of an install from before the master key was its own: moved under it now.
        legacy = MasterKey("loopwright-kms:" + LEGACY_SECRET_KEY)
        master_key_rewrap(old=legacy, new=master_key(), strict=False)
        key, role_arn = self._local_account()
        children = [self._http(opts)]
        for i, base in enumerate(opts["base_models"] or DEFAULT_WORKERS):
            children.append(self._worker(f"local{i}", base, opts["device"]))
        stop = threading.Event()
        threading.Thread(target=run_forever, args=(stop,), daemon=True).start()
        url = f"http://{opts['host']}:{opts['port']}"
        self.stdout.write(
            f"\nLoopwright is starting at {url}\n"
            f"  export LOOPWRIGHT_BASE_URL={url}\n"
            f"  export LOOPWRIGHT_API_KEY={key}\n"
            f"  export LOOPWRIGHT_ROLE_ARN={role_arn}\n"
            f"data: {settings.DATA_DIR}   (Ctrl-C stops)\n"
        )
        if settings.METRICS_TOKEN:
            self.stdout.write(
                f"/metrics wants Authorization: Bearer <token>; the token is in "
                f"{settings.DATA_DIR}/metrics-token unless LOOPWRIGHT_METRICS_TOKEN sets it\n"
            )
        self._supervise(children, stop)

    def _local_account(self) -> tuple[str, str]:
        """The local account's API key and session role ARN, made on first start."""
        key_file, role_file = (
            Path(settings.DATA_DIR) / "api-key",
            Path(settings.DATA_DIR) / "role-arn",
        )
        if key_file.exists() and role_file.exists():
            return key_file.read_text().strip(), role_file.read_text().strip()
        account = account_create(
            email=f"owner-{secrets.token_hex(4)}@local.invalid",
            password=None,
            tenant_name="local",
            key_name="local",
        )
        key_file.write_text(account.api_key + "\n")
        key_file.chmod(0o600)
        role_file.write_text(account.session_role.arn + "\n")
        return account.api_key, account.session_role.arn

    def _http(self, opts) -> subprocess.Popen:
        """gunicorn with the production config file, as the compose file and the chart run it
        (its logs scrubbed of secrets)."""
        cmd = [
            sys.executable,
            "-m",
            "gunicorn",
            "-c",
            "python:controlplane.gunicorn_conf",
            "controlplane.wsgi:application",
        ]
        env = {
            **os.environ,
            "LOOPWRIGHT_HTTP_HOST": opts["host"],
            "LOOPWRIGHT_HTTP_PORT": str(opts["port"]),
            "LOOPWRIGHT_HTTP_WORKERS": "1",
            "LOOPWRIGHT_HTTP_THREADS": str(opts["threads"]),
        }
        return subprocess.Popen(cmd, env=env)  # noqa: S603 — our own interpreter and modules, fixed arguments

    def _worker(self, name: str, base_model: str, device: str) -> subprocess.Popen:
        cmd = [
            sys.executable,
            "-m",
            "workers.run",
            "--name",
            name,
            "--base-model",
            base_model,
            "--device",
            device,
        ]
        return subprocess.Popen(cmd)  # noqa: S603 — our own interpreter and modules, fixed arguments

    def _supervise(self, children: list[subprocess.Popen], stop: threading.Event) -> None:
        def shutdown(*_):
            stop.set()

        signal.signal(signal.SIGTERM, shutdown)
        signal.signal(signal.SIGINT, shutdown)
        try:
            while not stop.is_set():
                if any(c.poll() is not None for c in children):
                    self.stderr.write("a process exited; stopping everything")
                    break
                time.sleep(0.5)
        finally:
            for c in children:
                if c.poll() is None:
                    c.terminate()
            for c in children:
                try:
                    c.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    c.kill()
