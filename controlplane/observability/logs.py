"""Logging for every process: plain lines by default, one JSON object per line with
``LOOPWRIGHT_LOG_FORMAT=json`` (timestamp, level, logger, event, and whatever is bound: the
``request_id`` of the HTTP request, the ``operation_id`` and ``kind`` a worker is running)."""

from __future__ import annotations

import structlog

_CHAIN = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
]


def logging_config(*, fmt: str, level: str) -> dict:
    """A ``logging.config.dictConfig`` for Django's ``LOGGING`` (and gunicorn's
    ``logconfig_dict``): ``fmt`` is ``text`` or ``json``."""
    if fmt not in ("text", "json"):
        raise ValueError(f"LOOPWRIGHT_LOG_FORMAT must be text or json, not {fmt!r}")
    formatters = {
        "json": {
            "()": structlog.stdlib.ProcessorFormatter,
            "foreign_pre_chain": _CHAIN,
            "processors": [
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                structlog.processors.JSONRenderer(),
            ],
        },
        "text": {"format": "%(message)s"},  # as Python's logging writes by default
    }
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {fmt: formatters[fmt]},
        # no token, key or signature reaches a log line, the access log's URLs included
        "filters": {"scrub": {"()": "controlplane.observability.scrub.ScrubFilter"}},
        "handlers": {
            "console": {"class": "logging.StreamHandler", "formatter": fmt, "filters": ["scrub"]}
        },
        "root": {"handlers": ["console"], "level": level},
        # gunicorn's own loggers (its config file passes this dict on)
        "loggers": {
            "gunicorn.error": {"level": "INFO", "handlers": [], "propagate": True},
            "gunicorn.access": {"level": "INFO", "handlers": [], "propagate": True},
        },
    }
