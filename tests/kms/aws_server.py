"""moto's KMS served over real HTTP on localhost, for tests that talk to AWS KMS through boto3.

Import the fixtures into a conftest (or a test module) to use them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from moto.core.exceptions import JsonRESTError
from moto.kms.models import KmsBackend

from tests.moto_server import aws_client, moto_served


def _refuse_unusable_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make moto answer as AWS does for keys that are not Enabled.

    moto 5.2 encrypts and decrypts with Disabled and PendingDeletion keys; AWS KMS answers
    DisabledException and KMSInvalidStateException. The server runs in this process, so its
    backend is taught those two answers here.
    """
    encrypt, decrypt = KmsBackend.encrypt, KmsBackend.decrypt

    def check(backend: KmsBackend, key_id: str) -> None:
        key = backend.keys[backend.any_id_to_key_id(key_id)]
        if key.key_state == "Disabled":
            raise JsonRESTError("DisabledException", f"{key.arn} is disabled.")
        if key.key_state != "Enabled":
            raise JsonRESTError("KMSInvalidStateException", f"{key.arn} is {key.key_state}.")

    def checked_encrypt(self: KmsBackend, key_id: str, *args: Any, **kwargs: Any) -> Any:
        check(self, key_id)
        return encrypt(self, key_id, *args, **kwargs)

    def checked_decrypt(self: KmsBackend, *args: Any, **kwargs: Any) -> Any:
        plaintext, arn = decrypt(self, *args, **kwargs)
        check(self, arn)
        return plaintext, arn

    monkeypatch.setattr(KmsBackend, "encrypt", checked_encrypt)
    monkeypatch.setattr(KmsBackend, "decrypt", checked_decrypt)


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with moto_served() as url, pytest.MonkeyPatch.context() as monkeypatch:
        _refuse_unusable_keys(monkeypatch)
        yield url


@pytest.fixture(scope="module")
def kms(endpoint: str) -> Iterator[Any]:
    client = aws_client("kms", endpoint)
    yield client
    client.close()
