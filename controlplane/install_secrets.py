"""The install's secrets (the Django secret, the KMS master key, the metrics token): from the
environment, else, on the embedded default, generated once into the data folder (mode 0600) and
read from there by every process; a production start without them refuses, naming the variable."""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

# Values published in code or docs at some time: never accepted as a secret, whatever the mode.
LEGACY_SECRET_KEY = "insecure-development-key-change-me"  # noqa: S105 — a published value refused as a secret, or a file name
KNOWN_DEFAULTS = frozenset(
    {
        LEGACY_SECRET_KEY,
        "loopwright-kms:" + LEGACY_SECRET_KEY,  # the KMS master key once derived from it
        "change-me",
        "changeme",
        "secret",
    }
)
# Django's `startproject` writes keys with this prefix: a project template's, not an install's.
_KNOWN_PREFIXES = ("django-insecure-",)

# The files of the embedded default, in its data folder.
SECRET_KEY_FILE = "secret-key"  # noqa: S105 — a published value refused as a secret, or a file name
SECRET_KEY_FALLBACKS_FILE = "secret-key.previous"  # noqa: S105 — a published value refused as a secret, or a file name
KMS_MASTER_KEY_FILE = "kms-master-key"
METRICS_TOKEN_FILE = "metrics-token"  # noqa: S105 — a published value refused as a secret, or a file name


def is_known_default(value: str) -> bool:
    return value in KNOWN_DEFAULTS or value.startswith(_KNOWN_PREFIXES)


def new_secret() -> str:
    """64 URL-safe characters (384 random bits)."""
    return secrets.token_urlsafe(48)


def read_file(path: Path) -> str:
    return path.read_text(encoding="utf-8").strip()


def write_new(path: Path, value: str) -> bool:
    """Write ``value`` to ``path`` (mode 0600) unless it exists; False when another process
    was first. The file appears whole (linked from a private temporary file) or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{secrets.token_hex(6)}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(value + "\n")
        try:
            os.link(temp, path)
        except FileExistsError:
            return False
        return True
    finally:
        temp.unlink(missing_ok=True)


def replace_file(path: Path, value: str) -> None:
    """Write ``value`` to ``path`` (mode 0600), replacing it atomically."""
    temp = path.with_name(f".{path.name}.{secrets.token_hex(6)}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(value + "\n")
    os.replace(temp, path)


class Resolver:
    """Reads each secret for ``settings.py``. ``generate``: the embedded default (SQLite under the
    data folder, so one machine) or DEBUG, where a missing secret is made once into the data
    folder; elsewhere (PostgreSQL, DEBUG off: production) a missing one is an error, since each
    process would make a different one."""

    def __init__(self, environ: Mapping[str, str], data_dir: Path, *, generate: bool) -> None:
        self.environ = environ
        self.data_dir = data_dir
        self.generate = generate

    def secret(self, variable: str, filename: str, *, what: str) -> str:
        value = self.environ.get(variable, "").strip()
        if value:
            if is_known_default(value):
                raise ImproperlyConfigured(
                    f"{variable} is a published default value, not a secret: set it to a new "
                    "random value (e.g. `openssl rand -hex 32`); docs/security.md, 'Secrets'"
                )
            return value
        path = self.data_dir / filename
        if path.exists():
            return read_file(path)
        if not self.generate:
            raise ImproperlyConfigured(
                f"{variable} is not set: {what}. Set it to a random value of your own (e.g. "
                "`openssl rand -hex 32`), the same in every process, and keep it; only the "
                "embedded default (`python manage.py serve`, SQLite) makes its own under "
                f"{self.data_dir}. docs/security.md, 'Secrets'"
            )
        write_new(path, new_secret())
        return read_file(path)  # the first writer's, if another process made it meanwhile

    def listed(self, variable: str, filename: str) -> list[str]:
        """Earlier values kept while a rotation completes: the variable (comma-separated), or
        the embedded default's file (one a line)."""
        raw = self.environ.get(variable, "")
        values = [v.strip() for v in raw.split(",") if v.strip()]
        path = self.data_dir / filename
        if not values and path.exists():
            values = [v for v in read_file(path).splitlines() if v.strip()]
        if any(is_known_default(v) for v in values):
            raise ImproperlyConfigured(
                f"{variable} holds a published default value: what it signed anyone could have "
                "signed; leave it out"
            )
        return values


def kms_master_key_checked(value: str, *, secret_key: str) -> str:
    """The KMS master key, refused when it is the Django secret or was derived from it."""
    if value in (secret_key, "loopwright-kms:" + secret_key):
        raise ImproperlyConfigured(
            "LOOPWRIGHT_KMS_MASTER_KEY must be a secret of its own, not DJANGO_SECRET_KEY or a "
            "value made from it; to move to a new one, see docs/security.md, 'Rotating secrets'"
        )
    return value
