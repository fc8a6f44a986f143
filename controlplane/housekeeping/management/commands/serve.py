"""Run the whole service on one machine: control plane, GPU worker(s), housekeeping.

Embedded default: SQLite and a filesystem broker under LOOPWRIGHT_DATA_DIR, no other server.
Prints the local API key and session role (kept in <data dir>/api-key and role-arn) and the URL,
and the lines that point boto3 and sagemaker-train here with a local access key pair (kept in
<data dir>/sagemaker.env).
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

from controlplane.access_keys.services import OPERATOR, access_key_create
from controlplane.housekeeping.janitor import run_forever
from controlplane.iam.arns import Arn
from controlplane.iam.provisioning import account_create
from controlplane.tenants.models import Membership

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
        key, role_arn = self._local_account()
        url = f"http://{opts['host']}:{opts['port']}"
        aws = self._sagemaker_exports(role_arn, url)
        children = [self._http(opts)]
        for i, base in enumerate(opts["base_models"] or DEFAULT_WORKERS):
            children.append(self._worker(f"local{i}", base, opts["device"]))
        stop = threading.Event()
        threading.Thread(target=run_forever, args=(stop,), daemon=True).start()
        self.stdout.write(
            f"\nLoopwright is starting at {url}\n"
            f"  export LOOPWRIGHT_BASE_URL={url}\n"
            f"  export LOOPWRIGHT_API_KEY={key}\n"
            f"  export LOOPWRIGHT_ROLE_ARN={role_arn}\n"
            f"SageMaker's clients (boto3, sagemaker-train), also in {self._aws_file()}:\n"
            f"{aws}"
            f"data: {settings.DATA_DIR}   (Ctrl-C stops)\n"
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

    @staticmethod
    def _aws_file() -> Path:
        return Path(settings.DATA_DIR) / "sagemaker.env"

    def _sagemaker_exports(self, role_arn: str, url: str) -> str:
        """The export lines for SageMaker's clients, with the local owner's access key pair
        (made on first start; the file keeps it, readable by its owner only)."""
        path = self._aws_file()
        pair = _read_pair(path) if path.exists() else None
        if pair is None:
            account = Arn.parse(role_arn).account
            owner = (
                Membership.objects.select_related("tenant", "user")
                .filter(tenant__account_id=account, role=Membership.Role.OWNER)
                .order_by("created_at")
                .first()
            )
            if owner is None:
                raise RuntimeError(f"the local account {account} has no owner")
            key, secret = access_key_create(
                tenant=owner.tenant, actor=OPERATOR, name="local", user=owner.user
            )
            pair = (key.access_key_id, secret)
        lines = sagemaker_exports(url, *pair)
        path.write_text(lines)
        path.chmod(0o600)
        return lines

    def _http(self, opts) -> subprocess.Popen:
        cmd = [
            sys.executable,
            "-m",
            "gunicorn",
            "controlplane.wsgi:application",
            "--bind",
            f"{opts['host']}:{opts['port']}",
            "--worker-class",
            "gthread",
            "--workers",
            "1",
            "--threads",
            str(opts["threads"]),
            "--timeout",
            "120",
            "--access-logfile",
            "-",
        ]
        return subprocess.Popen(cmd)

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
        return subprocess.Popen(cmd)

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


def sagemaker_exports(url: str, key_id: str, secret: str) -> str:
    """The lines that point boto3 and sagemaker-train at ``url`` (both planes, and the Public
    Hub look-ups, which go through ``AWS_ENDPOINT_URL_SAGEMAKER``), signing in this service's
    region."""
    return (
        f"  export AWS_ACCESS_KEY_ID={key_id}\n"
        f"  export AWS_SECRET_ACCESS_KEY={secret}\n"
        f"  export AWS_REGION={settings.AWS_REGION}\n"
        # boto3 itself reads the region from AWS_DEFAULT_REGION; sagemaker-train from AWS_REGION
        f"  export AWS_DEFAULT_REGION={settings.AWS_REGION}\n"
        f"  export SAGEMAKER_TRAINING_SESSION_ENDPOINT={url}/sagemaker\n"
        f"  export SAGEMAKER_TRAINING_SESSION_RUNTIME_ENDPOINT={url}/sagemaker-runtime\n"
        f"  export AWS_ENDPOINT_URL_SAGEMAKER={url}/sagemaker\n"
    )


def _read_pair(path: Path) -> tuple[str, str] | None:
    found = {}
    for line in path.read_text().splitlines():
        name, _, value = line.strip().removeprefix("export ").partition("=")
        found[name] = value
    key_id, secret = found.get("AWS_ACCESS_KEY_ID"), found.get("AWS_SECRET_ACCESS_KEY")
    return (key_id, secret) if key_id and secret else None
