"""The AWS KMS provider against moto's KMS served over real HTTP on localhost."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from controlplane.kms.envelope import open_bytes, read_header, seal_bytes
from controlplane.kms.keyring import (
    AwsKmsProvider,
    ContextMismatchError,
    KeyAccessDeniedError,
    KeyDisabledError,
    KeyNotFoundError,
    KeyRef,
    KeyState,
    KmsError,
    MasterKey,
    TamperedError,
    new_key_arn,
    provider_for,
)

CONTEXT = {"tenant": "acct-1", "resource": "arn:loopwright:checkpoint::acct-1:ckpt/9"}
DATA = os.urandom(1000)


@pytest.fixture
def aws_key(kms: Any) -> KeyRef:
    key_id = kms.create_key(Description="tenant key")["KeyMetadata"]["KeyId"]
    return KeyRef(
        arn=new_key_arn("123456789012"), provider="aws", current_version=0, aws_key_id=key_id
    )


def opener(key: KeyRef, kms: Any, context: dict[str, str] = CONTEXT) -> dict[str, Any]:
    return {
        "key_lookup": lambda arn: key,
        "provider_for_key": lambda k: provider_for(
            k, master=MasterKey("unused"), aws_client_factory=lambda: kms
        ),
        "expected_context": context,
    }


def seal(key: KeyRef, kms: Any, data: bytes = DATA) -> bytes:
    return seal_bytes(data, key=key, provider=AwsKmsProvider(kms), context=CONTEXT, chunk_size=128)


def test_round_trip(aws_key: KeyRef, kms: Any) -> None:
    blob = seal(aws_key, kms)
    header = read_header(blob)
    assert (header.provider, header.key_version, header.key_arn) == ("aws", 0, aws_key.arn)
    assert open_bytes(blob, **opener(aws_key, kms)) == DATA
    assert seal(aws_key, kms) != blob  # a fresh data key per object


def test_data_key_is_bound_to_context(aws_key: KeyRef, kms: Any) -> None:
    provider = AwsKmsProvider(kms)
    plaintext, wrapped, version = provider.generate_data_key(aws_key, CONTEXT)
    assert (len(plaintext), version) == (32, 0)
    assert provider.decrypt_data_key(aws_key, wrapped, 0, CONTEXT) == plaintext
    with pytest.raises(TamperedError, match="InvalidCiphertextException"):
        provider.decrypt_data_key(aws_key, wrapped, 0, {**CONTEXT, "tenant": "acct-2"})


def test_context_mismatch_fails(aws_key: KeyRef, kms: Any) -> None:
    blob = seal(aws_key, kms)
    other = {**CONTEXT, "tenant": "acct-2"}
    with pytest.raises(ContextMismatchError):
        open_bytes(blob, **opener(aws_key, kms, other))
    header = read_header(blob)
    forged = dataclasses.replace(header, context=other).raw + blob[len(header.raw) :]
    with pytest.raises(TamperedError, match="InvalidCiphertextException"):
        open_bytes(forged, **opener(aws_key, kms, other))


def test_key_disabled_in_aws(aws_key: KeyRef, kms: Any) -> None:
    blob = seal(aws_key, kms)
    kms.disable_key(KeyId=aws_key.aws_key_id)
    with pytest.raises(KeyDisabledError, match=f"{aws_key.arn} is Disabled") as caught:
        seal(aws_key, kms)
    assert "DisabledException" in str(caught.value)
    with pytest.raises(KeyDisabledError, match=aws_key.arn):
        open_bytes(blob, **opener(aws_key, kms))
    kms.enable_key(KeyId=aws_key.aws_key_id)
    assert open_bytes(seal(aws_key, kms), **opener(aws_key, kms)) == DATA
    assert open_bytes(blob, **opener(aws_key, kms)) == DATA


def test_key_pending_deletion_in_aws(aws_key: KeyRef, kms: Any) -> None:
    blob = seal(aws_key, kms)
    kms.schedule_key_deletion(KeyId=aws_key.aws_key_id, PendingWindowInDays=7)
    with pytest.raises(KeyDisabledError, match="KMSInvalidStateException"):
        open_bytes(blob, **opener(aws_key, kms))
    kms.cancel_key_deletion(KeyId=aws_key.aws_key_id)  # AWS leaves a cancelled key Disabled
    kms.enable_key(KeyId=aws_key.aws_key_id)
    assert open_bytes(blob, **opener(aws_key, kms)) == DATA


class Unreachable:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"AWS KMS was called ({name}) for a key our records mark unusable")


@pytest.mark.parametrize("state", ["Disabled", "PendingDeletion"])
def test_recorded_state_is_checked_before_calling_aws(
    aws_key: KeyRef, kms: Any, state: KeyState
) -> None:
    blob = seal(aws_key, kms)
    off = dataclasses.replace(aws_key, state=state)
    with pytest.raises(KeyDisabledError, match=f"{off.arn} is {state}"):
        seal(off, Unreachable())
    with pytest.raises(KeyDisabledError, match=f"{off.arn} is {state}"):
        open_bytes(blob, **opener(off, Unreachable()))


def test_another_aws_key_cannot_open(aws_key: KeyRef, kms: Any) -> None:
    other_id = kms.create_key(Description="another tenant")["KeyMetadata"]["KeyId"]
    blob = seal(aws_key, kms)
    impostor = dataclasses.replace(aws_key, aws_key_id=other_id)
    # AWS answers IncorrectKeyException (-> TamperedError); moto answers AccessDeniedException.
    with pytest.raises((TamperedError, KeyAccessDeniedError)):
        open_bytes(blob, **opener(impostor, kms))
    other = KeyRef(arn=new_key_arn("2"), provider="aws", current_version=0, aws_key_id=other_id)
    foreign = seal(other, kms)
    wrapped = read_header(foreign).wrapped_key
    header = read_header(blob)
    swapped = dataclasses.replace(header, wrapped_key=wrapped).raw + blob[len(header.raw) :]
    with pytest.raises((TamperedError, KeyAccessDeniedError)):
        open_bytes(swapped, **opener(aws_key, kms))


def test_unknown_aws_key(kms: Any) -> None:
    missing = KeyRef(
        arn=new_key_arn("1"),
        provider="aws",
        current_version=0,
        aws_key_id="11111111-2222-3333-4444-555555555555",
    )
    with pytest.raises(KeyNotFoundError, match="does not exist"):
        seal(missing, kms)


def test_versions_other_than_zero_are_missing(aws_key: KeyRef, kms: Any) -> None:
    _, wrapped, _ = AwsKmsProvider(kms).generate_data_key(aws_key, CONTEXT)
    with pytest.raises(KmsError, match="only version 0"):
        AwsKmsProvider(kms).decrypt_data_key(aws_key, wrapped, 1, CONTEXT)


class Failing:
    """A client whose every call fails with one AWS error code."""

    def __init__(self, code: str) -> None:
        self.code = code

    def __getattr__(self, operation: str) -> Any:
        def call(**params: Any) -> Any:
            error = {"Error": {"Code": self.code, "Message": "said AWS"}}
            raise ClientError(error, operation)

        return call


@pytest.mark.parametrize(
    ("code", "error"),
    [
        ("DisabledException", KeyDisabledError),
        ("KMSInvalidStateException", KeyDisabledError),
        ("InvalidCiphertextException", TamperedError),
        ("IncorrectKeyException", TamperedError),
        ("NotFoundException", KeyNotFoundError),
        ("AccessDeniedException", KeyAccessDeniedError),
        ("ThrottlingException", KmsError),
    ],
)
def test_error_codes(aws_key: KeyRef, code: str, error: type[KmsError]) -> None:
    provider = AwsKmsProvider(Failing(code))
    with pytest.raises(error, match=code) as caught:
        provider.generate_data_key(aws_key, CONTEXT)
    assert aws_key.arn in str(caught.value)
    with pytest.raises(error, match=code):
        provider.decrypt_data_key(aws_key, b"wrapped", 0, CONTEXT)


def test_unreachable_endpoint(aws_key: KeyRef) -> None:
    class Down:
        def generate_data_key(self, **params: Any) -> Any:
            raise EndpointConnectionError(endpoint_url="http://127.0.0.1:9")

    with pytest.raises(KmsError, match="Could not connect"):
        AwsKmsProvider(Down()).generate_data_key(aws_key, CONTEXT)
