"""A server process imports its views when it starts, so no page's first view waits for them;
the base models the pages list are read without their tokenizer files."""

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


def test_the_base_models_a_page_lists_come_without_their_tokenizer_files(db, worker) -> None:
    from controlplane.fleet.selectors import served_base_models

    [base] = served_base_models()
    assert base.name == worker.base_model_id
    assert "tokenizer_files" in base.get_deferred_fields()  # megabytes no page shows
    assert isinstance(base.tokenizer_files, dict)  # still there when asked for
