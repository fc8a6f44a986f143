"""A server process imports its views when it starts, so no page's first view waits for them."""

from __future__ import annotations

import subprocess
import sys

from django.conf import settings


def test_the_wsgi_application_loads_every_view_when_it_is_made() -> None:
    code = (
        "import sys; import controlplane.wsgi; "
        "print(all(m in sys.modules for m in ('web.pages.sessions', 'controlplane.openapi')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=settings.BASE_DIR,
    )
    assert out.stdout.strip() == "True", out.stderr[-2000:]
