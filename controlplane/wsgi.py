"""WSGI entry point for gunicorn and friends.

The URL configuration, and with it every view and the API's schema, is imported here, when the
process starts: otherwise the first request a process answers (whichever page it is) would wait
seconds for those imports."""

import os

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
application = get_wsgi_application()
get_resolver().url_patterns  # noqa: B018 — imported for its side effect: every view loaded now
