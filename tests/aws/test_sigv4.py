"""The SigV4 verifier against botocore's own signer: a signed request is its key's principal;
a wrong secret, a revoked or unknown key, a time outside the window, a tampered body or header,
another region or service, an expired presigned URL are each refused with AWS's error code."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta

import pytest
from botocore.auth import UNSIGNED_PAYLOAD
from django.utils import timezone

from controlplane.access_keys.authentication import caller_of
from controlplane.access_keys.models import AccessKey
from controlplane.access_keys.services import access_key_revoke
from controlplane.access_keys.sigv4 import SigV4Error

from .signing import as_django, presigned, signed

pytestmark = pytest.mark.django_db


def refused(request, **kw) -> SigV4Error:
    with pytest.raises(SigV4Error) as caught:
        caller_of(request, **kw)
    assert caught.value.status < 500
    return caught.value


def test_a_signed_request_is_its_keys_principal(holders) -> None:
    alice, bob, _ = holders
    caller = caller_of(as_django(signed(alice.key_id, alice.secret)))
    assert caller.principal.arn == alice.account.role_arn
    assert caller.key.access_key_id == alice.key_id
    caller = caller_of(as_django(signed(bob.key_id, bob.secret)))
    assert caller.principal.arn.endswith(":user/bob@example.com")
    assert caller.principal.tenant == alice.tenant


def test_a_body_with_a_declared_digest_and_a_query_string(holders) -> None:
    alice = holders[0]
    body = json.dumps({"MaxResults": 3}).encode()
    request = signed(
        alice.key_id,
        alice.secret,
        url="http://testserver/sagemaker?a=1&b=%2Fx%20y",
        body=body,
        headers={"X-Amz-Content-SHA256": hashlib.sha256(body).hexdigest()},
    )
    assert caller_of(as_django(request)).principal.arn == alice.account.role_arn


def test_missing_signature(holders) -> None:
    django_request = as_django(signed(holders[0].key_id, holders[0].secret))
    del django_request.META["HTTP_AUTHORIZATION"]
    assert refused(django_request).code == "MissingAuthenticationTokenException"


def test_wrong_secret(holders) -> None:
    alice = holders[0]
    wrong = alice.secret[:-1] + ("B" if alice.secret.endswith("A") else "A")  # 1 in 16 end in A
    error = refused(as_django(signed(alice.key_id, wrong)))
    assert error.code == "InvalidSignatureException"
    assert alice.secret not in error.message


def test_unknown_and_revoked_keys(holders) -> None:
    alice = holders[0]
    error = refused(as_django(signed("LWAKAAAAAAAAAAAAAAAA", alice.secret)))
    assert error.code == "UnrecognizedClientException"
    error = refused(as_django(signed("AKIAIOSFODNN7EXAMPLE", alice.secret)))
    assert error.code == "UnrecognizedClientException"
    assert caller_of(as_django(signed(alice.key_id, alice.secret)))
    access_key_revoke(key=AccessKey.objects.get(access_key_id=alice.key_id), actor="test")
    error = refused(as_django(signed(alice.key_id, alice.secret)))
    assert error.code == "UnrecognizedClientException"


def test_an_expired_key(holders) -> None:
    alice = holders[0]
    AccessKey.objects.filter(access_key_id=alice.key_id).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert refused(as_django(signed(alice.key_id, alice.secret))).code == (
        "UnrecognizedClientException"
    )


@pytest.mark.parametrize("minutes", [-16, 16, -60 * 24])
def test_a_time_outside_the_window(holders, minutes) -> None:
    alice = holders[0]
    when = timezone.now() + timedelta(minutes=minutes)
    error = refused(as_django(signed(alice.key_id, alice.secret, when=when)))
    assert error.code == "InvalidSignatureException"
    assert "Signature expired" in error.message or "not yet current" in error.message


@pytest.mark.parametrize("minutes", [-14, 14])
def test_a_time_inside_the_window(holders, minutes) -> None:
    alice = holders[0]
    when = timezone.now() + timedelta(minutes=minutes)
    assert caller_of(as_django(signed(alice.key_id, alice.secret, when=when)))


def test_a_tampered_body(holders) -> None:
    alice = holders[0]
    request = signed(alice.key_id, alice.secret, body={"MaxResults": 3})
    request.data = json.dumps({"MaxResults": 4}).encode()
    assert refused(as_django(request)).code == "InvalidSignatureException"


def test_a_tampered_header(holders) -> None:
    alice = holders[0]
    request = signed(alice.key_id, alice.secret, target="SageMaker.DescribeTrainingSession")
    request.headers.replace_header("X-Amz-Target", "SageMaker.DeleteTrainingSession")
    assert refused(as_django(request)).code == "InvalidSignatureException"


def test_a_tampered_path_and_query(holders) -> None:
    alice = holders[0]
    request = signed(alice.key_id, alice.secret, url="http://testserver/sagemaker?x=1")
    assert refused(as_django(request, QUERY_STRING="x=2")).code == "InvalidSignatureException"
    moved = as_django(request)
    moved.path = moved.path_info = "/sagemaker-runtime"
    assert refused(moved).code == "InvalidSignatureException"


def test_another_host(holders) -> None:
    alice = holders[0]
    request = signed(alice.key_id, alice.secret)
    assert refused(as_django(request, HTTP_HOST="elsewhere:8000")).code == (
        "InvalidSignatureException"
    )


def test_other_region_or_service(holders) -> None:
    alice = holders[0]
    error = refused(as_django(signed(alice.key_id, alice.secret, region="eu-west-1")))
    assert (error.code, "region") == ("InvalidSignatureException", "region")
    assert "eu-west-1" in error.message
    error = refused(as_django(signed(alice.key_id, alice.secret, service="s3")))
    assert error.code == "InvalidSignatureException"
    assert "service" in error.message


def test_the_region_is_a_setting(holders, settings) -> None:
    alice = holders[0]
    settings.AWS_REGION = "eu-west-1"
    assert caller_of(as_django(signed(alice.key_id, alice.secret, region="eu-west-1")))
    assert refused(as_django(signed(alice.key_id, alice.secret))).code == (
        "InvalidSignatureException"
    )


def test_a_required_header_must_be_signed(holders) -> None:
    alice = holders[0]
    request = signed(alice.key_id, alice.secret, target=None)
    error = refused(as_django(request), required_headers=("x-amz-target",))
    assert error.code == "InvalidSignatureException"
    assert "x-amz-target" in error.message


def test_unsigned_payload_only_where_allowed(holders) -> None:
    alice = holders[0]
    request = signed(
        alice.key_id,
        alice.secret,
        body=b'{"a": 1}',
        headers={"X-Amz-Content-SHA256": UNSIGNED_PAYLOAD},
    )
    assert refused(as_django(request)).code == "InvalidSignatureException"
    assert caller_of(as_django(request), unsigned_payload=True)


def test_a_declared_digest_must_be_the_bodys(holders) -> None:
    alice = holders[0]
    request = signed(
        alice.key_id,
        alice.secret,
        body=b'{"a": 1}',
        headers={"X-Amz-Content-SHA256": hashlib.sha256(b'{"a": 2}').hexdigest()},
    )
    assert refused(as_django(request)).code == "InvalidSignatureException"


@pytest.mark.parametrize(
    "authorization",
    [
        "AWS4-HMAC-SHA256",
        "AWS4-HMAC-SHA256 Credential=LWAKAAAAAAAAAAAAAAAA/20250101/us-east-1/sagemaker/aws4_request",
        "AWS4-HMAC-SHA256 Credential=x, SignedHeaders=host, Signature=00",
        "AWS3 Credential=a, SignedHeaders=host, Signature=00",
        "Bearer tml-abc.def",
        "AWS4-HMAC-SHA256 " + "Credential=a," * 2000,
    ],
)
def test_malformed_authorization(holders, authorization) -> None:
    request = signed(holders[0].key_id, holders[0].secret)
    error = refused(as_django(request, HTTP_AUTHORIZATION=authorization))
    assert error.code in ("IncompleteSignature", "InvalidSignatureException")


def test_malformed_date(holders) -> None:
    request = signed(holders[0].key_id, holders[0].secret)
    error = refused(as_django(request, HTTP_X_AMZ_DATE="yesterday"))
    assert error.code in ("IncompleteSignature", "InvalidSignatureException")


def test_a_presigned_url(holders) -> None:
    alice = holders[0]
    request = presigned(alice.key_id, alice.secret)
    assert caller_of(as_django(request)).principal.arn == alice.account.role_arn


def test_a_presigned_url_used_after_expiry(holders) -> None:
    alice = holders[0]
    request = presigned(
        alice.key_id, alice.secret, expires=60, when=timezone.now() - timedelta(seconds=61)
    )
    error = refused(as_django(request))
    assert error.code == "InvalidSignatureException"
    assert "expired" in error.message


def test_a_presigned_url_with_a_tampered_query(holders) -> None:
    alice = holders[0]
    request = presigned(alice.key_id, alice.secret, expires=60)
    django_request = as_django(request)
    query = django_request.META["QUERY_STRING"].replace("X-Amz-Expires=60", "X-Amz-Expires=600")
    assert refused(as_django(request, QUERY_STRING=query)).code == "InvalidSignatureException"
    query = django_request.META["QUERY_STRING"] + "&extra=1"
    assert refused(as_django(request, QUERY_STRING=query)).code == "InvalidSignatureException"


def test_a_session_token_is_not_ours(holders) -> None:
    alice = holders[0]
    request = signed(alice.key_id, alice.secret, headers={"X-Amz-Security-Token": "FwoG"})
    assert refused(as_django(request)).code == "UnrecognizedClientException"
