"""gunicorn's worker class for the control plane (``worker_class`` in ``controlplane.gunicorn_conf``):
uvicorn on an asyncio loop with ``GuardedProtocol``, serving the WSGI app gunicorn loaded through
``WsgiBridge`` with gunicorn's ``threads`` as its thread pool and ``worker_connections`` as the
most connections it holds (503 past it)."""

from __future__ import annotations

import functools
import logging

from uvicorn_worker import UvicornWorker

from .bridge import WsgiBridge
from .limits import ServingLimits
from .protocol import GuardedProtocol


class Worker(UvicornWorker):
    CONFIG_KWARGS = {
        "loop": "asyncio",
        "http": "httptools",  # replaced by GuardedProtocol once the settings are loaded
        "interface": "asgi3",
        "lifespan": "off",
        # the app reads X-Forwarded-For itself, as far as LOOPWRIGHT_TRUSTED_PROXIES says
        "proxy_headers": False,
        "server_header": False,
    }

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for name in ("uvicorn.error", "uvicorn.access"):
            logger = logging.getLogger(name)
            if not logger.handlers:  # gunicorn logs through the root logger (logconfig_dict)
                logger.propagate = True

    async def _serve(self) -> None:
        from django.conf import settings  # gunicorn has loaded the app: Django is set up

        limits = ServingLimits.from_settings(settings, self.cfg)
        self.config.http = functools.partial(GuardedProtocol, limits=limits)
        self.config.limit_concurrency = self.cfg.worker_connections
        self.wsgi = WsgiBridge(
            self.wsgi,
            threads=self.cfg.threads,
            max_body=limits.max_body,
            write_timeout=limits.deadline,
        )
        await super()._serve()
