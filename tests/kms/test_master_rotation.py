"""Rotating the KMS master key (``manage.py rotate_kms_master_key``): what was sealed before
opens after it, every key version is re-wrapped, and the old master key opens nothing; from the
environment (with the previous key set) and on the embedded default (the key in the data folder)."""

from __future__ import annotations

import secrets

import pytest
from django.core.management import CommandError, call_command

from controlplane import install_secrets
from controlplane.kms import providers, services
from controlplane.kms.envelope import open_bytes, seal_bytes
from controlplane.kms.keyring import MasterKey, TamperedError
from controlplane.kms.master_rotation import unopenable
from controlplane.kms.models import KmsKeyVersion
from controlplane.kms.selectors import key_ref, key_ref_by_arn
from controlplane.tenants.services import tenant_create

pytestmark = pytest.mark.django_db
CONTEXT = {"tenant": "t", "resource": "checkpoint"}


def sealed_data(tenant) -> tuple[str, list[bytes]]:
    """A key with two versions and data sealed under each; (its ARN, the sealed blobs)."""
    key = services.key_create(tenant=tenant, actor="test")
    first = seal_bytes(b"before", key=key_ref(key), provider=providers.provider(key_ref(key)), context=CONTEXT)  # fmt: skip
    services.key_rotate(tenant=tenant, actor="test", key_id=str(key.id))
    key.refresh_from_db()
    second = seal_bytes(b"rotated", key=key_ref(key), provider=providers.provider(key_ref(key)), context=CONTEXT)  # fmt: skip
    return key.arn, [first, second]


def opened(tenant, arn: str, blobs: list[bytes]) -> list[bytes]:
    found = []
    for blob in blobs:
        plain = open_bytes(
            blob,
            key_lookup=lambda a: key_ref_by_arn(tenant_id=tenant.pk, arn=a),
            provider_for_key=providers.provider,
            expected_context=CONTEXT,
        )
        found.append(plain)
    return found


def materials() -> dict[tuple[str, int], bytes]:
    rows = KmsKeyVersion.objects.select_related("key")
    return {(r.key.arn, r.version): bytes(r.material) for r in rows}


def test_from_the_environment_everything_moves_and_the_old_key_opens_nothing(settings) -> None:
    old, new = secrets.token_urlsafe(48), secrets.token_urlsafe(48)
    settings.KMS_MASTER_KEY, settings.KMS_MASTER_KEY_PREVIOUS = old, None
    tenant = tenant_create(name="acme")
    arn, blobs = sealed_data(tenant)
    before = materials()
    assert len(before) == 2

    # every process restarted with the new key and the old one as previous: still opens
    settings.KMS_MASTER_KEY, settings.KMS_MASTER_KEY_PREVIOUS = new, old
    assert opened(tenant, arn, blobs) == [b"before", b"rotated"]
    assert len(unopenable(MasterKey(new))) == 2
    call_command("rotate_kms_master_key")
    after = materials()
    assert all(after[k] != before[k] for k in before)
    assert unopenable(MasterKey(new)) == []
    call_command("rotate_kms_master_key")  # again: nothing left to move
    assert materials() == after

    # previous removed: data sealed before the rotation opens; the old key opens no material
    settings.KMS_MASTER_KEY_PREVIOUS = None
    assert opened(tenant, arn, blobs) == [b"before", b"rotated"]
    retired = MasterKey(old)
    for (key_arn, version), wrapped in after.items():
        with pytest.raises(TamperedError):
            retired.unwrap_material(wrapped, key_arn=key_arn, version=version)
    settings.KMS_MASTER_KEY = old
    with pytest.raises(TamperedError):
        opened(tenant, arn, blobs)


def test_material_under_neither_key_stops_the_rotation_unchanged(settings) -> None:
    settings.KMS_MASTER_KEY, settings.KMS_MASTER_KEY_PREVIOUS = "k" * 64, None
    sealed_data(tenant_create(name="acme"))
    before = materials()
    settings.KMS_MASTER_KEY, settings.KMS_MASTER_KEY_PREVIOUS = "n" * 64, "w" * 64
    with pytest.raises(CommandError, match="opens under neither"):
        call_command("rotate_kms_master_key")
    assert materials() == before


def test_the_embedded_default_makes_its_new_key_itself(settings, tmp_path) -> None:
    settings.DATA_DIR = tmp_path
    key_file = tmp_path / install_secrets.KMS_MASTER_KEY_FILE
    install_secrets.write_new(key_file, install_secrets.new_secret())
    old = install_secrets.read_file(key_file)
    settings.KMS_MASTER_KEY, settings.KMS_MASTER_KEY_PREVIOUS = old, None
    tenant = tenant_create(name="acme")
    arn, blobs = sealed_data(tenant)

    call_command("rotate_kms_master_key")
    new = install_secrets.read_file(key_file)
    assert new != old and key_file.stat().st_mode & 0o777 == 0o600
    assert not key_file.with_name(key_file.name + ".next").exists()
    settings.KMS_MASTER_KEY = new  # as the restarted service reads it
    assert opened(tenant, arn, blobs) == [b"before", b"rotated"]
    assert len(unopenable(MasterKey(old))) == 2


def test_a_key_from_the_environment_without_the_previous_one_is_explained(settings) -> None:
    settings.KMS_MASTER_KEY, settings.KMS_MASTER_KEY_PREVIOUS = "e" * 64, None
    with pytest.raises(CommandError, match="LOOPWRIGHT_KMS_MASTER_KEY_PREVIOUS"):
        call_command("rotate_kms_master_key")


def test_what_the_service_seals_for_itself_opens_only_in_its_context() -> None:
    master = MasterKey("m" * 64, previous="p" * 64)
    sealed = master.seal(b"access-key-secret", purpose="test", context={"id": "1"})
    assert master.open(sealed, purpose="test", context={"id": "1"}) == b"access-key-secret"
    with pytest.raises(TamperedError):
        master.open(sealed, purpose="test", context={"id": "2"})
    by_previous = MasterKey("p" * 64).seal(b"old", purpose="test", context={})
    assert master.open(by_previous, purpose="test", context={}) == b"old"
    with pytest.raises(TamperedError):
        MasterKey("p" * 64).open(sealed, purpose="test", context={"id": "1"})


def test_an_install_from_before_moves_its_keys_off_the_derived_master_key(settings) -> None:
    """What ``manage.py serve`` does at start: material wrapped under the key once derived from
    the published default moves under the install's own; anything else is left alone."""
    from controlplane.install_secrets import LEGACY_SECRET_KEY
    from controlplane.kms.master_rotation import master_key_rewrap

    legacy = "loopwright-kms:" + LEGACY_SECRET_KEY
    settings.KMS_MASTER_KEY, settings.KMS_MASTER_KEY_PREVIOUS = legacy, None
    tenant = tenant_create(name="acme")
    arn, blobs = sealed_data(tenant)
    settings.KMS_MASTER_KEY = "own" * 20
    counts = master_key_rewrap(old=MasterKey(legacy), new=providers.master_key(), strict=False)
    assert counts["kms key versions"] == 2
    assert opened(tenant, arn, blobs) == [b"before", b"rotated"]
    assert len(unopenable(MasterKey(legacy))) == 2


def test_access_key_secrets_move_with_the_master_key(settings) -> None:
    """An access key pair keeps signing across the rotation: its sealed secret is re-sealed
    under the new master key, which the old one then cannot open."""
    from controlplane.access_keys.models import AccessKey
    from controlplane.access_keys.sealing import SEAL_VERSION, access_key_arn, secret_open
    from controlplane.access_keys.services import access_key_create
    from controlplane.iam.models import Role

    old, new = secrets.token_urlsafe(48), secrets.token_urlsafe(48)
    settings.KMS_MASTER_KEY, settings.KMS_MASTER_KEY_PREVIOUS = old, None
    tenant = tenant_create(name="acme")
    role = Role.objects.create(tenant=tenant, name="ci", trust_policy={})
    key, secret = access_key_create(tenant=tenant, actor="test", name="ci", role=role)

    settings.KMS_MASTER_KEY, settings.KMS_MASTER_KEY_PREVIOUS = new, old
    call_command("rotate_kms_master_key")
    settings.KMS_MASTER_KEY_PREVIOUS = None
    row = AccessKey.objects.get(pk=key.pk)
    assert bytes(row.sealed_secret) != bytes(key.sealed_secret)
    opened_secret = secret_open(
        account_id=tenant.account_id, access_key_id=key.access_key_id, sealed=row.sealed_secret
    )
    assert opened_secret == secret
    with pytest.raises(TamperedError):
        MasterKey(old).unwrap_material(
            bytes(row.sealed_secret),
            key_arn=access_key_arn(tenant.account_id, key.access_key_id),
            version=SEAL_VERSION,
        )
