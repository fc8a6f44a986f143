"""Who signed an AWS-style request: ``caller_of`` checks its SigV4 signature and answers the
principal the access key acts as; ``SigV4Authentication`` is the same for DRF views.

Each process keeps what an access key id resolves to (its row, its principal and policies, its
opened secret) for ``AUTH_CACHE_SECONDS`` on PostgreSQL; any change to a key, a membership, a
role or a policy empties every process's cache at once (``controlplane.process_cache``), so a
revoked key is refused from the next request on.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.http import HttpRequest
from django.utils import timezone
from rest_framework import authentication, exceptions

from controlplane import process_cache
from controlplane.iam.principals import Principal, for_api_key
from controlplane.kms.keyring import TamperedError

from . import sigv4
from .models import AccessKey
from .sealing import secret_open
from .selectors import live_access_key
from .services import access_key_touch
from .sigv4 import SigV4Error

__all__ = ["Caller", "SigV4Authentication", "SigV4Error", "caller_of"]

SERVICE = "sagemaker"  # the signing name of both SageMaker planes

_resolved = process_cache.ProcessCache()  # access key id -> (key, principal, secret)


@dataclass(frozen=True)
class Caller:
    principal: Principal
    key: AccessKey


def caller_of(
    request: HttpRequest,
    *,
    service: str = SERVICE,
    unsigned_payload: bool = False,
    required_headers: tuple[str, ...] = (),
) -> Caller:
    """The principal whose access key signed ``request``, or ``SigV4Error`` (AWS's code, never a
    5xx). ``unsigned_payload``: the operation allows ``X-Amz-Content-SHA256: UNSIGNED-PAYLOAD``;
    ``required_headers``: lower-case names that must be among the signed headers (e.g.
    ``x-amz-target``, which picks the operation)."""
    signed = sigv4.parse(request)
    region = sigv4.region()
    sigv4.check_scope(signed, service=service, region=region)
    for name in required_headers:
        if name not in signed.signed_headers:
            raise sigv4.invalid(f"'{name}' must be a 'SignedHeader' in the AWS Authorization.")
    if request.headers.get("X-Amz-Security-Token") is not None or "X-Amz-Security-Token=" in (
        request.META.get("QUERY_STRING", "")
    ):
        raise SigV4Error("UnrecognizedClientException", sigv4.BAD_TOKEN)
    key, principal, secret = _resolve(signed.access_key_id)
    body = request.body
    rebuilt = sigv4.rebuilt(request, signed, body)
    sigv4.payload_hash(rebuilt, body, unsigned_payload=unsigned_payload)
    if not sigv4.signature_matches(rebuilt, signed, secret, service=service, region=region):
        raise sigv4.invalid()
    access_key_touch(key=key)
    return Caller(principal=principal, key=key)


def _resolve(access_key_id: str) -> tuple[AccessKey, Principal, str]:
    cacheable = process_cache.usable()
    if cacheable:
        hit = _resolved.get(access_key_id)
        if hit is not None and _live(hit[0]):
            return hit
        generation = _resolved.generation
    key = live_access_key(access_key_id)
    principal = for_api_key(key) if key is not None else None  # acts as an API key would
    if key is None or principal is None:
        raise SigV4Error("UnrecognizedClientException", sigv4.BAD_TOKEN)
    try:
        secret = secret_open(
            account_id=key.tenant.account_id,
            access_key_id=key.access_key_id,
            sealed=key.sealed_secret,
        )
    except TamperedError:  # sealed under another master key: the key cannot sign anything
        raise SigV4Error("UnrecognizedClientException", sigv4.BAD_TOKEN) from None
    found = (key, principal, secret)
    if cacheable:
        principal.policies()  # evaluated once, kept with the principal
        _resolved.put(access_key_id, generation, found)
    return found


def _live(key: AccessKey) -> bool:
    return key.revoked_at is None and (key.expires_at is None or key.expires_at > timezone.now())


class SigV4Authentication(authentication.BaseAuthentication):
    """DRF's face of ``caller_of``: ``(principal, access key)``, or ``SigV4Failed`` (a DRF
    ``AuthenticationFailed`` holding the ``SigV4Error``) for the view's exception handler to
    answer in AWS's shape. Subclass to set ``service``, ``unsigned_payload`` or
    ``required_headers``."""

    service = SERVICE
    unsigned_payload = False
    required_headers: tuple[str, ...] = ()

    def authenticate(self, request):
        try:
            caller = caller_of(
                request._request,
                service=self.service,
                unsigned_payload=self.unsigned_payload,
                required_headers=self.required_headers,
            )
        except SigV4Error as exc:
            raise SigV4Failed(exc) from None
        return caller.principal, caller.key

    def authenticate_header(self, request) -> str:
        return sigv4.ALGORITHM


class SigV4Failed(exceptions.AuthenticationFailed):
    def __init__(self, error: SigV4Error) -> None:
        super().__init__(error.message)
        self.error = error
