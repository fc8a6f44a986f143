"""The install's secrets: a production start refuses without them (naming the variable), the
embedded default makes them once (mode 0600) and every process reuses them; rotating the
Django secret keeps API keys and invitations working (each moves to the new secret on use)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from controlplane import install_secrets
from controlplane.iam.models import ApiKey
from controlplane.tenants.services import key_digest

ROOT = Path(__file__).resolve().parents[2]
PRINT = "from django.conf import settings as s; print(s.SECRET_KEY, s.KMS_MASTER_KEY)"


def settings_of(env: dict[str, str], data_dir: Path) -> subprocess.CompletedProcess:
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DJANGO_SECRET_KEY", "LOOPWRIGHT_KMS_MASTER_KEY", "DATABASE_URL")
    }
    script = "import django; django.setup(); " + PRINT
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**clean, "LOOPWRIGHT_DATA_DIR": str(data_dir), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


PRODUCTION = {"DATABASE_URL": "postgres://postgres@127.0.0.1:5432/unused", "DJANGO_DEBUG": "0"}
GOOD = "x" * 20 + "good-secret-of-this-install" + "y" * 20


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({}, "DJANGO_SECRET_KEY is not set"),
        ({"DJANGO_SECRET_KEY": ""}, "DJANGO_SECRET_KEY is not set"),
        ({"DJANGO_SECRET_KEY": GOOD}, "LOOPWRIGHT_KMS_MASTER_KEY is not set"),
        (
            {"DJANGO_SECRET_KEY": "insecure-development-key-change-me"},
            "DJANGO_SECRET_KEY is a published default",
        ),
        (
            {"DJANGO_SECRET_KEY": GOOD, "LOOPWRIGHT_KMS_MASTER_KEY": "loopwright-kms:" + GOOD},
            "LOOPWRIGHT_KMS_MASTER_KEY must be a secret of its own",
        ),
        (
            {"DJANGO_SECRET_KEY": GOOD, "LOOPWRIGHT_KMS_MASTER_KEY": GOOD},
            "LOOPWRIGHT_KMS_MASTER_KEY must be a secret of its own",
        ),
        (
            {
                "DJANGO_SECRET_KEY": GOOD,
                "LOOPWRIGHT_KMS_MASTER_KEY": "k" * 64,
                "DJANGO_SECRET_KEY_FALLBACKS": "insecure-development-key-change-me",
            },
            "DJANGO_SECRET_KEY_FALLBACKS holds a published default",
        ),
    ],
)
def test_a_production_start_refuses_naming_the_variable(tmp_path, env, named) -> None:
    out = settings_of({**PRODUCTION, **env}, tmp_path)
    assert out.returncode != 0 and named in out.stderr, out.stderr[-2000:]
    assert list(tmp_path.iterdir()) == []  # nothing made on its behalf


def test_a_production_start_with_its_secrets_runs(tmp_path) -> None:
    env = {**PRODUCTION, "DJANGO_SECRET_KEY": GOOD, "LOOPWRIGHT_KMS_MASTER_KEY": "k" * 64}
    out = settings_of(env, tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == [GOOD, "k" * 64]


def test_the_embedded_default_makes_its_secrets_once(tmp_path) -> None:
    first, second = settings_of({}, tmp_path), settings_of({}, tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    secret, master = first.stdout.split()
    assert second.stdout.split() == [secret, master]  # every process reads the same
    assert secret != master and len(secret) >= 50 and len(master) >= 50
    for name in ("secret-key", "kms-master-key", "metrics-token"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "secret-key").read_text().strip() == secret


def test_concurrent_first_starts_agree(tmp_path) -> None:
    path = tmp_path / "secret-key"
    assert install_secrets.write_new(path, "first")
    assert not install_secrets.write_new(path, "second")
    assert install_secrets.read_file(path) == "first"
    assert [p.name for p in tmp_path.iterdir()] == ["secret-key"]


@pytest.mark.django_db
def test_api_keys_and_invitations_survive_a_rotation_of_the_django_secret(alice, settings):
    key = ApiKey.objects.get(prefix=alice.key.split(".")[0])
    old = settings.SECRET_KEY
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = "n" * 64, [old]
    client = APIClient()
    client.credentials(HTTP_X_API_KEY=alice.key)
    assert client.get("/api/v1/auth/whoami").status_code == 200
    key.refresh_from_db()
    assert key.digest == key_digest(alice.key)  # moved to the new secret on first use
    settings.SECRET_KEY_FALLBACKS = []  # the rotation finished
    assert client.get("/api/v1/auth/whoami").status_code == 200
    settings.SECRET_KEY = "o" * 64  # a secret it was never under
    assert client.get("/api/v1/auth/whoami").status_code == 401


@pytest.mark.django_db
def test_a_key_of_an_install_from_before_moves_to_its_own_secret(alice):
    key = ApiKey.objects.get(prefix=alice.key.split(".")[0])
    key.digest = key_digest(alice.key, install_secrets.LEGACY_SECRET_KEY)
    key.save(update_fields=["digest"])
    client = APIClient()
    client.credentials(HTTP_X_API_KEY=alice.key)
    assert client.get("/api/v1/auth/whoami").status_code == 200
    key.refresh_from_db()
    assert key.digest == key_digest(alice.key)


def test_the_embedded_default_rotates_its_django_secret(settings, tmp_path) -> None:
    settings.DATA_DIR = tmp_path
    install_secrets.write_new(tmp_path / "secret-key", "s" * 64)
    settings.SECRET_KEY = "s" * 64
    call_command("rotate_secret_key")
    new = install_secrets.read_file(tmp_path / "secret-key")
    assert new != "s" * 64 and (tmp_path / "secret-key").stat().st_mode & 0o777 == 0o600
    assert install_secrets.read_file(tmp_path / "secret-key.previous") == "s" * 64
    settings.SECRET_KEY = new  # as the restarted service reads it
    call_command("rotate_secret_key", "--finish")
    assert not (tmp_path / "secret-key.previous").exists()
    settings.SECRET_KEY = "e" * 64  # from the environment: explained, not done
    with pytest.raises(Exception, match="DJANGO_SECRET_KEY_FALLBACKS"):
        call_command("rotate_secret_key")
