"""No secret in a log line: token-, key-, signature- and credential-like query parameters
(SigV4's presigned ones among them), API keys and invitation tokens are scrubbed from every
line, access log lines' URLs and Referer included, whatever the log format."""

from __future__ import annotations

import io
import logging
import logging.config

import pytest

from controlplane.observability.logs import logging_config
from controlplane.observability.scrub import scrub

SIGV4 = (
    "/endpoints/e/invocations?X-Amz-Algorithm=AWS4-HMAC-SHA256"
    "&X-Amz-Credential=AKIAEXAMPLE%2F20250101%2Fus-east-1%2Fsagemaker%2Faws4_request"
    "&X-Amz-Date=20250101T000000Z&X-Amz-Expires=300&X-Amz-SignedHeaders=host"
    "&X-Amz-Security-Token=FwoGZXIvYXdzEXAMPLE&X-Amz-Signature=0123456789abcdef"
)


@pytest.mark.parametrize(
    ("line", "secrets", "kept"),
    [
        (
            'GET /api/v1/registry/signed-downloads?token=eyJ0:1x:abc HTTP/1.1" 200',
            ["eyJ0:1x:abc"],
            ["signed-downloads?token="],
        ),
        (SIGV4, ["AKIAEXAMPLE", "FwoGZXIvYXdzEXAMPLE", "0123456789abcdef"], ["X-Amz-Date=2025"]),
        ('"http://h/invitations/accept?token=inv-abcdefghijkl&x=1"', ["abcdefghijkl"], ["x=1"]),
        ("/login?next=%2Finvitations%2Faccept%3Ftoken%3Dinv-zyxwvutsrq", ["zyxwvutsrq"], []),
        ("/x?api_key=k1&access_token=t1&password=p1&page=2", ["k1", "t1", "p1"], ["page=2"]),
        (
            "key tml-0a1b2c3d4e5f.S3cretPartOfTheKey used",
            ["S3cretPartOfTheKey"],
            ["tml-0a1b2c3d4e5f"],
        ),
        ("invited with inv-abcdefghijklmnop", ["abcdefghijklmnop"], []),
    ],
)
def test_secrets_are_scrubbed_and_the_rest_kept(line, secrets, kept) -> None:
    out = scrub(line)
    assert not [s for s in secrets if s in out], out
    assert all(k in out for k in kept), out


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_every_log_line_is_scrubbed(fmt) -> None:
    stream = io.StringIO()
    config = logging_config(fmt=fmt, level="INFO")
    config["handlers"]["console"]["stream"] = stream
    logging.config.dictConfig(config)
    try:
        access = logging.getLogger("gunicorn.access")
        access.info('%(r)s "%(f)s"', {"r": "GET /d?token=SEKRET1 HTTP/1.1", "f": "/a?key=SEKRET2"})
        logging.getLogger("django.request").warning("Not Found: %s", "/x?signature=SEKRET3")
    finally:
        logging.config.dictConfig(logging_config(fmt="text", level="INFO"))
    text = stream.getvalue()
    assert "SEKRET" not in text and text.count("[redacted]") == 3, text
