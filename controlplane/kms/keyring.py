"""Tenant key references, the server master key, and the providers that issue data keys.

Local keys keep versioned 32-byte material wrapped under the master key; AWS keys live in AWS KMS.
"""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

ProviderName = Literal["local", "aws"]
KeyState = Literal["Enabled", "Disabled", "PendingDeletion"]

PROVIDERS: tuple[str, ...] = ("local", "aws")
KEY_STATES: tuple[str, ...] = ("Enabled", "Disabled", "PendingDeletion")
KEY_SIZE = 32  # AES-256, for master, key-version material and data keys alike
NONCE_SIZE = 12
TAG_SIZE = 16
WRAPPED_SIZE = NONCE_SIZE + KEY_SIZE + TAG_SIZE  # nonce || AES-GCM(32-byte key) || tag

# Changing either constant makes every stored key unreadable.
_MASTER_SALT = b"loopwright/kms/master-salt/v1"
_MASTER_INFO = b"loopwright/kms/master-key/v1"


class KmsError(Exception):
    """Any failure to seal or open data with a tenant key."""


class KeyDisabledError(KmsError):
    """The key exists but is not Enabled, so it neither seals nor opens anything."""

    def __init__(self, key_arn: str, state: str, detail: str = "") -> None:
        self.key_arn = key_arn
        self.state = state
        suffix = f" ({detail})" if detail else ""
        super().__init__(f"key {key_arn} is {state}{suffix}: it can neither seal nor open data")


class KeyVersionMissingError(KmsError):
    """The blob names a key version the key reference does not hold."""


class KeyNotFoundError(KmsError):
    """The key does not exist (in our records or in AWS KMS)."""


class KeyAccessDeniedError(KmsError):
    """AWS KMS refused the call (key policy, grants or IAM)."""


class TamperedError(KmsError):
    """Authentication failed: the data, its header or its wrapped key is not what was sealed."""


class ContextMismatchError(TamperedError):
    """The blob was sealed under a different encryption context than the caller expects."""


@dataclass(frozen=True)
class KeyRef:
    """A tenant's customer key as the database holds it.

    ``versions`` (local keys) maps each version to its material wrapped under the master key;
    rotation adds a version and every older version keeps opening what it sealed.
    """

    arn: str
    provider: ProviderName
    state: KeyState = "Enabled"
    current_version: int = 1
    versions: Mapping[int, bytes] = field(default_factory=dict, repr=False, hash=False)
    aws_key_id: str | None = None

    def __post_init__(self) -> None:
        if not self.arn:
            raise ValueError("a key needs an ARN")
        if self.provider not in PROVIDERS:
            raise ValueError(f"unknown key provider {self.provider!r}; expected one of {PROVIDERS}")
        if self.state not in KEY_STATES:
            raise ValueError(f"unknown key state {self.state!r}; expected one of {KEY_STATES}")
        if self.provider == "aws" and not self.aws_key_id:
            raise ValueError(f"AWS key {self.arn} needs aws_key_id")
        object.__setattr__(self, "versions", MappingProxyType(dict(self.versions)))


def new_key_arn(account_id: str) -> str:
    """A fresh ARN for a customer key of ``account_id``."""
    return f"arn:loopwright:kms::{account_id}:key/{uuid.uuid4()}"


def canonical_json(value: Any) -> bytes:
    """Sorted keys, no spaces, UTF-8: the same value always gives the same bytes."""
    text = json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return text.encode("utf-8")


def normalize_context(context: Mapping[str, str]) -> dict[str, str]:
    """A plain, key-sorted copy of an encryption context; every key and value must be a str."""
    if not isinstance(context, Mapping):
        raise TypeError(f"an encryption context is a mapping of str to str, not {type(context)}")
    for name, value in context.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise TypeError(f"encryption context entries must be str: {name!r}={value!r}")
    return dict(sorted(context.items()))


def ensure_usable(key: KeyRef) -> None:
    """Raise ``KeyDisabledError`` unless the key is Enabled."""
    if key.state != "Enabled":
        raise KeyDisabledError(key.arn, key.state)


class MasterKey:
    """The server secret (``LOOPWRIGHT_KMS_MASTER_KEY``) stretched by HKDF-SHA256 to AES-256.

    ``previous``: the secret it replaces, while ``manage.py rotate_kms_master_key`` re-wraps
    what that one wrapped; it only opens (``unwrap_material``, ``open``), never wraps.
    """

    __slots__ = ("_aead", "_previous")

    def __init__(self, secret: str | bytes, previous: str | bytes | None = None) -> None:
        raw = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
        if not raw:
            raise ValueError("the KMS master key secret is empty")
        hkdf = HKDF(algorithm=SHA256(), length=KEY_SIZE, salt=_MASTER_SALT, info=_MASTER_INFO)
        self._aead = AESGCM(hkdf.derive(raw))
        self._previous = MasterKey(previous) if previous else None

    def __repr__(self) -> str:
        return "MasterKey(<redacted>)"

    def wrap_material(self, material: bytes, *, key_arn: str, version: int) -> bytes:
        """AES-GCM-encrypt one key version's material, bound to its ARN and version."""
        if len(material) != KEY_SIZE:
            raise ValueError(f"key material is {KEY_SIZE} bytes, got {len(material)}")
        nonce = os.urandom(NONCE_SIZE)
        return nonce + self._aead.encrypt(nonce, material, _material_aad(key_arn, version))

    def unwrap_material(self, wrapped: bytes, *, key_arn: str, version: int) -> bytes:
        """The material of ``key_arn`` version ``version``; ``TamperedError`` if it does not authenticate."""
        if len(wrapped) == WRAPPED_SIZE:
            opened = self._open_either(wrapped, _material_aad(key_arn, version))
            if opened is not None:
                return opened
        raise TamperedError(
            f"material of key {key_arn} version {version} does not authenticate under the "
            "server master key (wrong master key, or the stored material was altered)"
        )

    def seal(self, plaintext: bytes, *, purpose: str, context: Mapping[str, str]) -> bytes:
        """Any secret the service keeps for itself (not a tenant key's material), bound to
        ``purpose`` and ``context``: nonce || AES-GCM(plaintext) || tag."""
        nonce = os.urandom(NONCE_SIZE)
        return nonce + self._aead.encrypt(nonce, plaintext, _sealed_aad(purpose, context))

    def open(self, sealed: bytes, *, purpose: str, context: Mapping[str, str]) -> bytes:
        """What ``seal`` sealed with the same ``purpose`` and ``context``; ``TamperedError``
        otherwise."""
        opened = self._open_either(sealed, _sealed_aad(purpose, context))
        if opened is None:
            raise TamperedError(
                f"a secret sealed for {purpose} does not authenticate under the server master "
                "key (wrong master key, another context, or altered)"
            )
        return opened

    def opens_current(self, wrapped: bytes, *, key_arn: str, version: int) -> bool:
        """Whether ``wrapped`` is already wrapped under this key itself (not ``previous``)."""
        return self._open(wrapped, _material_aad(key_arn, version)) is not None

    def _open_either(self, blob: bytes, aad: bytes) -> bytes | None:
        opened = self._open(blob, aad)
        if opened is None and self._previous is not None:
            opened = self._previous._open(blob, aad)
        return opened

    def _open(self, blob: bytes, aad: bytes) -> bytes | None:
        if len(blob) < NONCE_SIZE + TAG_SIZE:
            return None
        try:
            return self._aead.decrypt(blob[:NONCE_SIZE], blob[NONCE_SIZE:], aad)
        except InvalidTag:
            return None


def _sealed_aad(purpose: str, context: Mapping[str, str]) -> bytes:
    return canonical_json({"context": normalize_context(context), "purpose": purpose})


def _material_aad(key_arn: str, version: int) -> bytes:
    return canonical_json({"key_arn": key_arn, "purpose": "key-material", "version": version})


def new_key_material(master: MasterKey, *, key_arn: str, version: int) -> bytes:
    """Fresh random material for ``key_arn`` version ``version``, already wrapped under ``master``."""
    return master.wrap_material(os.urandom(KEY_SIZE), key_arn=key_arn, version=version)


def new_local_key(account_id: str, master: MasterKey) -> KeyRef:
    """A new Enabled local key for ``account_id`` with version 1."""
    arn = new_key_arn(account_id)
    material = new_key_material(master, key_arn=arn, version=1)
    return KeyRef(arn=arn, provider="local", current_version=1, versions={1: material})


def rotate_local_key(key: KeyRef, master: MasterKey) -> KeyRef:
    """``key`` with a new current version; older versions stay to open what they sealed."""
    if key.provider != "local":
        raise KmsError(f"key {key.arn} is rotated by {key.provider}, not by Loopwright")
    version = max([key.current_version, *key.versions]) + 1
    material = new_key_material(master, key_arn=key.arn, version=version)
    versions = {**key.versions, version: material}
    return dataclasses.replace(key, current_version=version, versions=versions)


class KeyProvider(Protocol):
    """Issues and opens per-object data keys under a tenant key."""

    def generate_data_key(
        self, key: KeyRef, context: Mapping[str, str]
    ) -> tuple[bytes, bytes, int]:
        """(plaintext 32-byte data key, wrapped data key, key version used)."""
        ...

    def decrypt_data_key(
        self, key: KeyRef, wrapped: bytes, version: int, context: Mapping[str, str]
    ) -> bytes:
        """The plaintext data key; ``TamperedError`` if ``wrapped`` or ``context`` is wrong."""
        ...


class LocalKeyProvider:
    """Data keys from ``os.urandom``, wrapped with a key version's material (AES-256-GCM)."""

    def __init__(self, master: MasterKey) -> None:
        self._master = master

    def generate_data_key(
        self, key: KeyRef, context: Mapping[str, str]
    ) -> tuple[bytes, bytes, int]:
        version = key.current_version
        kek = AESGCM(self._material(key, version))
        data_key = os.urandom(KEY_SIZE)
        nonce = os.urandom(NONCE_SIZE)
        wrapped = nonce + kek.encrypt(nonce, data_key, _data_key_aad(key, version, context))
        return data_key, wrapped, version

    def decrypt_data_key(
        self, key: KeyRef, wrapped: bytes, version: int, context: Mapping[str, str]
    ) -> bytes:
        kek = AESGCM(self._material(key, version))
        failure = TamperedError(
            f"the data key wrapped under key {key.arn} version {version} does not authenticate "
            "(altered wrapped key or a different encryption context)"
        )
        if len(wrapped) != WRAPPED_SIZE:
            raise failure
        aad = _data_key_aad(key, version, context)
        try:
            return kek.decrypt(wrapped[:NONCE_SIZE], wrapped[NONCE_SIZE:], aad)
        except InvalidTag:
            raise failure from None

    def _material(self, key: KeyRef, version: int) -> bytes:
        ensure_usable(key)
        if key.provider != "local":
            raise KmsError(f"key {key.arn} belongs to provider {key.provider}, not local")
        try:
            wrapped = key.versions[version]
        except KeyError:
            known = ", ".join(map(str, sorted(key.versions))) or "none"
            raise KeyVersionMissingError(
                f"key {key.arn} has no version {version} (versions held: {known})"
            ) from None
        return self._master.unwrap_material(wrapped, key_arn=key.arn, version=version)


def _data_key_aad(key: KeyRef, version: int, context: Mapping[str, str]) -> bytes:
    return canonical_json(
        {"context": normalize_context(context), "key_arn": key.arn, "version": version}
    )


# AWS error code -> what it means for us; anything else is a plain KmsError.
_AWS_TAMPER_CODES = ("InvalidCiphertextException", "IncorrectKeyException")


class AwsKmsProvider:
    """Data keys from AWS KMS ``GenerateDataKey`` / ``Decrypt``; AWS rotates keys itself (version 0)."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def generate_data_key(
        self, key: KeyRef, context: Mapping[str, str]
    ) -> tuple[bytes, bytes, int]:
        key_id = self._key_id(key)
        response = self._call(
            key,
            "generate_data_key",
            KeyId=key_id,
            KeySpec="AES_256",
            EncryptionContext=normalize_context(context),
        )
        plaintext = bytes(response["Plaintext"])
        if len(plaintext) != KEY_SIZE:
            raise KmsError(f"AWS KMS returned a {len(plaintext)}-byte data key for {key.arn}")
        return plaintext, bytes(response["CiphertextBlob"]), 0

    def decrypt_data_key(
        self, key: KeyRef, wrapped: bytes, version: int, context: Mapping[str, str]
    ) -> bytes:
        key_id = self._key_id(key)
        if version != 0:
            raise KeyVersionMissingError(
                f"key {key.arn} is an AWS KMS key and has only version 0, not {version}"
            )
        response = self._call(
            key,
            "decrypt",
            CiphertextBlob=wrapped,
            EncryptionContext=normalize_context(context),
            KeyId=key_id,
        )
        plaintext = bytes(response["Plaintext"])
        if len(plaintext) != KEY_SIZE:
            raise TamperedError(f"the data key under {key.arn} is not a 256-bit key")
        return plaintext

    @staticmethod
    def _key_id(key: KeyRef) -> str:
        ensure_usable(key)
        if key.provider != "aws" or not key.aws_key_id:
            raise KmsError(f"key {key.arn} is not an AWS KMS key")
        return key.aws_key_id

    def _call(self, key: KeyRef, operation: str, **params: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return getattr(self._client, operation)(**params)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            raise _aws_error(
                key, operation, error.get("Code", ""), error.get("Message", "")
            ) from exc
        except BotoCoreError as exc:
            raise KmsError(f"AWS KMS {operation} for key {key.arn} failed: {exc}") from exc


def _aws_error(key: KeyRef, operation: str, code: str, message: str) -> KmsError:
    """Our error for an AWS KMS error code."""
    said = f"AWS KMS {operation}: {code}: {message}"
    if code == "DisabledException":
        return KeyDisabledError(key.arn, "Disabled", f"in AWS KMS; {said}")
    if code == "KMSInvalidStateException":
        return KeyDisabledError(key.arn, "not Enabled", f"e.g. pending deletion in AWS KMS; {said}")
    if code in _AWS_TAMPER_CODES:
        return TamperedError(
            f"AWS KMS cannot open the data key under {key.arn} (altered wrapped key, another "
            f"key's data, or a different encryption context); {said}"
        )
    if code == "NotFoundException":
        return KeyNotFoundError(f"key {key.arn} ({key.aws_key_id}) does not exist; {said}")
    if code == "AccessDeniedException":
        return KeyAccessDeniedError(f"AWS KMS denied access to {key.arn}; {said}")
    return KmsError(f"key {key.arn}: {said}")


def provider_for(
    key: KeyRef, *, master: MasterKey, aws_client_factory: Callable[[], Any] | None
) -> KeyProvider:
    """The provider that handles ``key``."""
    if key.provider == "local":
        return LocalKeyProvider(master)
    if aws_client_factory is None:
        raise KmsError(f"key {key.arn} lives in AWS KMS, but no AWS KMS client is configured")
    return AwsKmsProvider(aws_client_factory())
