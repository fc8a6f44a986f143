"""No secret in a log line: every line (access log lines with their URL and ``Referer`` too) has
the values of token-, key-, signature- and credential-like query parameters (SigV4's presigned
``X-Amz-*`` ones among them), API keys and invitation tokens replaced by ``[redacted]``."""

from __future__ import annotations

import logging
import re

REDACTED = "[redacted]"

# A query parameter (raw or percent-encoded separator) whose name says it carries a secret.
_PARAM = re.compile(
    r"(?P<name>(?:[?&;]|%3F|%26)[^=&;\s\"'#<>]*?"
    r"(?:token|key|secret|signature|sig|password|passwd|credential|auth|session|code)"
    r"[^=&;\s\"'#<>]*(?:=|%3D))(?P<value>[^&;\s\"'#<>]+)",
    re.IGNORECASE,
)
_API_KEY = re.compile(r"\b(tml-[0-9a-f]{6,32})\.[A-Za-z0-9_-]+")
_INVITATION = re.compile(r"\binv-[A-Za-z0-9_-]{8,}")


def scrub(text: str) -> str:
    """``text`` with every secret the patterns above recognise replaced."""
    text = _PARAM.sub(lambda m: m["name"] + REDACTED, text)
    text = _API_KEY.sub(lambda m: f"{m[1]}.{REDACTED}", text)
    return _INVITATION.sub("inv-" + REDACTED, text)


class ScrubFilter(logging.Filter):
    """On a handler: the record's message (format and arguments alike) scrubbed."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, dict):  # structlog's own event dicts
            record.msg = {k: scrub(v) if isinstance(v, str) else v for k, v in record.msg.items()}
            return True
        try:
            message = record.getMessage()
        except Exception:  # a malformed record is logging's to report, as it would
            return True
        scrubbed = scrub(message)
        if scrubbed != message:
            record.msg, record.args = scrubbed, None
        return True
