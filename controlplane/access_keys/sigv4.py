"""AWS Signature Version 4 on an incoming request, in the header form (``Authorization:
AWS4-HMAC-SHA256 Credential=…, SignedHeaders=…, Signature=…``) and the presigned-query form
(``X-Amz-Algorithm``, ``X-Amz-Credential``, … ``X-Amz-Signature``).

The request is rebuilt as a botocore ``AWSRequest`` from what arrived (the raw path and query,
the signed headers, the body) and botocore's own ``SigV4Auth`` computes the signature it should
carry; the two are compared in constant time. Around it: the credential scope (date, region,
service, terminator), a 15-minute clock-skew window (and a presigned URL's expiry), the payload
hash (``UNSIGNED-PAYLOAD`` only where the caller allows it) and the live access key. Every
refusal is a ``SigV4Error`` carrying AWS's error code.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from urllib.parse import parse_qsl, quote

from botocore.auth import SIGV4_TIMESTAMP, UNSIGNED_PAYLOAD, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from django.conf import settings
from django.http import HttpRequest
from django.utils import timezone

from .aws_errors import AwsError

ALGORITHM = "AWS4-HMAC-SHA256"
MAX_SKEW = timedelta(minutes=15)
MAX_PRESIGN_SECONDS = 7 * 24 * 3600  # what AWS allows a presigned URL to live
MAX_AUTHORIZATION = 8192  # characters of an Authorization header worth parsing
MAX_SIGNED_HEADERS = 64
BAD_SIGNATURE = (
    "The request signature we calculated does not match the signature you provided. Check your "
    "AWS Secret Access Key and signing method. Consult the service documentation for details."
)
BAD_TOKEN = "The security token included in the request is invalid."


class SigV4Error(AwsError):
    """A request whose signature does not hold, in AWS's words and codes."""

    def __init__(self, code: str, message: str, status: int = 403) -> None:
        super().__init__(code, message, status=status)


def incomplete(message: str) -> SigV4Error:
    return SigV4Error("IncompleteSignature", message, 400)


def invalid(message: str = BAD_SIGNATURE) -> SigV4Error:
    return SigV4Error("InvalidSignatureException", message)


@dataclass(frozen=True)
class Signed:
    """What a request says about its own signature, before it is checked."""

    access_key_id: str
    date: str  # the credential scope's YYYYMMDD
    region: str
    service: str
    terminator: str
    signed_headers: tuple[str, ...]
    signature: str
    timestamp: str  # YYYYMMDDTHHMMSSZ, as signed
    expires: int | None  # seconds, for a presigned URL
    query: str  # the canonical request's query: the raw one, less X-Amz-Signature


def parse(request: HttpRequest) -> Signed:
    """The signature's parts from the Authorization header or the presigned query."""
    header = request.headers.get("Authorization")
    raw_query = request.META.get("QUERY_STRING", "")
    if header is not None:
        return _from_header(request, header, raw_query)
    if "X-Amz-Algorithm=" in raw_query:
        return _from_query(raw_query)
    raise SigV4Error("MissingAuthenticationTokenException", "Missing Authentication Token")


def _from_header(request: HttpRequest, header: str, raw_query: str) -> Signed:
    if len(header) > MAX_AUTHORIZATION:
        raise incomplete(f"the Authorization header is over {MAX_AUTHORIZATION} characters")
    algorithm, _, rest = header.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise incomplete(f"Unsupported Authorization algorithm {algorithm[:40]!r}: {ALGORITHM}")
    parts: dict[str, str] = {}
    for item in rest.split(","):
        name, eq, value = item.strip().partition("=")
        if eq:
            parts[name] = value.strip()
    for required in ("Credential", "SignedHeaders", "Signature"):
        if not parts.get(required):
            raise incomplete(
                f"Authorization header requires '{required}' parameter. Authorization={ALGORITHM} "
                "Credential=…, SignedHeaders=…, Signature=…"
            )
    timestamp = _header_timestamp(request)
    return _signed(
        parts["Credential"], parts["SignedHeaders"], parts["Signature"], timestamp, None, raw_query
    )


def _header_timestamp(request: HttpRequest) -> str:
    amz = request.headers.get("X-Amz-Date")
    if amz is not None:
        return amz
    date = request.headers.get("Date")
    if date is None:
        raise incomplete(
            "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header."
        )
    try:
        return parsedate_to_datetime(date).astimezone(UTC).strftime(SIGV4_TIMESTAMP)
    except (TypeError, ValueError, OverflowError):
        raise incomplete(f"the Date header {date[:40]!r} is not an HTTP date") from None


def _from_query(raw_query: str) -> Signed:
    params: dict[str, str] = {}
    kept = []
    for pair in raw_query.split("&"):
        key, _, _value = pair.partition("=")
        if key == "X-Amz-Signature":
            continue
        kept.append(pair)
    for key, value in parse_qsl(raw_query, keep_blank_values=True, max_num_fields=1000):
        if key.startswith("X-Amz-"):
            params[key] = value
    for required in ("X-Amz-Credential", "X-Amz-Date", "X-Amz-SignedHeaders", "X-Amz-Signature"):
        if not params.get(required):
            raise incomplete(f"AWS query-string parameters must include '{required}'.")
    if params.get("X-Amz-Algorithm") != ALGORITHM:
        raise incomplete(f"X-Amz-Algorithm only supports '{ALGORITHM}'")
    expires_text = params.get("X-Amz-Expires", "")
    if not expires_text.isdigit() or not 1 <= int(expires_text) <= MAX_PRESIGN_SECONDS:
        raise incomplete(
            f"X-Amz-Expires must be a number of seconds from 1 to {MAX_PRESIGN_SECONDS}"
        )
    return _signed(
        params["X-Amz-Credential"],
        params["X-Amz-SignedHeaders"],
        params["X-Amz-Signature"],
        params["X-Amz-Date"],
        int(expires_text),
        "&".join(kept),
    )


def _signed(
    credential: str, headers: str, signature: str, timestamp: str, expires, query: str
) -> Signed:
    scope = credential.split("/")
    if len(scope) != 5:
        raise incomplete(
            f"Credential should be scoped to a valid access key id, date, region, service and "
            f"terminator: <key id>/<YYYYMMDD>/<region>/<service>/aws4_request, not "
            f"{credential[:200]!r}"
        )
    names = tuple(headers.split(";"))
    if len(names) > MAX_SIGNED_HEADERS:
        raise incomplete(f"at most {MAX_SIGNED_HEADERS} signed headers")
    return Signed(
        access_key_id=scope[0],
        date=scope[1],
        region=scope[2],
        service=scope[3],
        terminator=scope[4],
        signed_headers=names,
        signature=signature,
        timestamp=timestamp,
        expires=expires,
        query=query,
    )


def check_scope(signed: Signed, *, service: str, region: str) -> datetime:
    """The signing time, once the scope names this region and service and the time is within
    the window (or the presigned URL has not expired)."""
    try:
        when = datetime.strptime(signed.timestamp, SIGV4_TIMESTAMP).replace(tzinfo=UTC)
    except ValueError:
        raise incomplete(
            f"Date must be in ISO-8601 'basic format' (YYYYMMDD'T'HHMMSS'Z'), got "
            f"{signed.timestamp[:40]!r}"
        ) from None
    if signed.date != signed.timestamp[:8]:
        raise invalid(
            f"Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date "
            f"from HTTP: '{signed.date[:20]}' != '{signed.timestamp[:8]}'"
        )
    if signed.region != region:
        raise invalid(
            f"Credential should be scoped to a valid region, not '{signed.region[:40]}'; "
            f"this service signs in '{region}'."
        )
    if signed.service != service:
        raise invalid(f"Credential should be scoped to correct service: '{service}'.")
    if signed.terminator != "aws4_request":
        raise invalid(
            "Credential should be scoped with a valid terminator: 'aws4_request', not "
            f"'{signed.terminator[:40]}'."
        )
    if "host" not in signed.signed_headers:
        raise invalid("'Host' must be a 'SignedHeader' in the AWS Authorization.")
    _check_time(signed, when)
    return when


def _check_time(signed: Signed, when: datetime) -> None:
    now = timezone.now()
    stamp = now.strftime(SIGV4_TIMESTAMP)
    if when > now + MAX_SKEW:
        raise invalid(
            f"Signature not yet current: {signed.timestamp} is still later than "
            f"{(now + MAX_SKEW).strftime(SIGV4_TIMESTAMP)} ({stamp} + 15 min.)"
        )
    if signed.expires is not None:
        if now > when + timedelta(seconds=signed.expires):
            raise invalid(
                f"Signature expired: the URL was signed at {signed.timestamp} for "
                f"{signed.expires} seconds; it is now {stamp}"
            )
    elif when < now - MAX_SKEW:
        raise invalid(
            f"Signature expired: {signed.timestamp} is now earlier than "
            f"{(now - MAX_SKEW).strftime(SIGV4_TIMESTAMP)} ({stamp} - 15 min.)"
        )


def rebuilt(request: HttpRequest, signed: Signed, body: bytes) -> AWSRequest:
    """The request as its signer saw it: the raw path and query, the signed headers, the body."""
    headers = {}
    for name in signed.signed_headers:
        value = request.headers.get(name)
        if value is None:
            raise invalid(f"The header '{name[:60]}' is signed but not in the request.")
        headers[name] = value
    url = f"{request.scheme}://{headers['host']}{_raw_path(request)}"
    if signed.query:
        url += "?" + signed.query
    return AWSRequest(method=request.method, url=url, headers=headers, data=body)


def _raw_path(request: HttpRequest) -> str:
    """The path as the client sent it (percent-encoded): gunicorn's RAW_URI, else Django's path
    encoded as a client encodes it."""
    raw = request.META.get("RAW_URI")
    if raw:
        path = raw.split("?", 1)[0]
        if path.startswith("/"):
            return path
    return quote(request.path, safe="/~!$&'()*+,;=:@")


def payload_hash(request: AWSRequest, body: bytes, *, unsigned_payload: bool) -> None:
    """Check a declared ``X-Amz-Content-SHA256``: ``UNSIGNED-PAYLOAD`` where allowed, else the
    body's digest (botocore signs with the declared value when the header is there)."""
    declared = request.headers.get("x-amz-content-sha256")
    if declared is None:
        return
    if declared == UNSIGNED_PAYLOAD:
        if not unsigned_payload:
            raise invalid("UNSIGNED-PAYLOAD is not accepted for this operation: sign the body.")
        return
    if not hmac.compare_digest(declared.lower(), hashlib.sha256(body).hexdigest()):
        raise invalid(
            "The provided 'x-amz-content-sha256' header does not match what was computed."
        )


def signature_matches(
    request: AWSRequest, signed: Signed, secret: str, *, service: str, region: str
) -> bool:
    """Whether botocore's SigV4 over ``request`` with ``secret`` gives the signature sent."""
    signer = SigV4Auth(Credentials(signed.access_key_id, secret), service, region)
    request.context["timestamp"] = signed.timestamp
    request.context["payload_signing_enabled"] = True
    canonical = signer.canonical_request(request)
    expected = signer.signature(signer.string_to_sign(request, canonical), request)
    return hmac.compare_digest(expected, signed.signature)


def region() -> str:
    """The region this service signs in (``LOOPWRIGHT_AWS_REGION``)."""
    return settings.AWS_REGION
