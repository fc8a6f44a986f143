"""A Loopwright started the way ``make serve`` starts it (``manage.py serve``: SQLite and the
filesystem broker in a data folder of its own, no secret in the environment), on the tiny model,
and clients that connect from a chosen loopback address (127.0.0.0/8 is all this machine's), so
a test speaks from as many addresses as it needs."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.e2e.stack import ROOT, TINY, free_port

PASSWORD = "correct horse battery staple"
_LEFT_OUT = ("DATABASE_URL", "DJANGO_SECRET_KEY", "LOOPWRIGHT_BROKER_URL", "DJANGO_SETTINGS_MODULE")


class Served:
    def __init__(self, data_dir: Path, env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {k: v for k, v in os.environ.items() if k not in _LEFT_OUT and
                    not k.startswith("LOOPWRIGHT_")}  # fmt: skip
        self.env |= {
            "PYTHONPATH": str(ROOT),
            "HF_HUB_OFFLINE": "1",
            "LOOPWRIGHT_DATA_DIR": str(data_dir),
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        self.proc: subprocess.Popen | None = None
        self.log_path = data_dir / "serve.log"

    def start(self, timeout: float = 240) -> Served:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "manage.py",
                    "serve",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--base-model",
                    TINY,
                ],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"manage.py serve exited: {self.logs()}")
            key_file = self.data_dir / "api-key"
            try:
                if key_file.exists():
                    r = httpx.get(
                        f"{self.url}/api/v1/base_models",
                        headers={"X-API-Key": key_file.read_text().strip()},
                        timeout=5,
                    )
                    if r.status_code == 200 and any(
                        m["name"] == TINY for m in r.json()["base_models"]
                    ):
                        return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"manage.py serve not ready: {self.logs()}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:] if self.log_path.exists() else ""

    def client(self, address: str = "127.0.0.1", **kwargs) -> httpx.Client:
        """An HTTP client whose connections come from ``address`` (a 127.x.y.z)."""
        transport = httpx.HTTPTransport(local_address=address)
        kwargs.setdefault("timeout", 60)
        return httpx.Client(base_url=self.url, transport=transport, **kwargs)

    def signup(self, name: str, address: str) -> dict:
        """A new account owned by ``name``@example.com, signed up from ``address``."""
        with self.client(address) as client:
            r = client.post(
                "/api/v1/auth/signup",
                json={"email": f"{name}@example.com", "password": PASSWORD, "tenant_name": name},
            )
        assert r.status_code == 201, r.text
        return r.json()


def browser(served: Served, address: str, email: str, password: str = PASSWORD) -> httpx.Client:
    """A dashboard session: the login form posted with its CSRF token, from ``address``."""
    client = served.client(address, follow_redirects=False)
    r = client.post(
        "/login",
        data={"email": email, "password": password, "csrfmiddlewaretoken": csrf(client, "/login")},
    )
    assert r.status_code == 302, r.text
    return client


def csrf(client: httpx.Client, path: str) -> str:
    """The CSRF token of the form on ``path`` (the cookie is kept by the client)."""
    page = client.get(path).text
    match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert match is not None, page[:500]
    return match.group(1)
