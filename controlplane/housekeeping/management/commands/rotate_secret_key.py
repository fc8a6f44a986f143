"""Move the embedded default to a new Django secret (the old one kept as a fallback until
``--finish``); from the environment the same is done by hand (docs/security.md)."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from controlplane import install_secrets

_HOW = (
    "set DJANGO_SECRET_KEY to the new secret and DJANGO_SECRET_KEY_FALLBACKS to the old one in "
    "every process and restart them; logins and download links made before stay valid, and "
    "each API key moves to the new secret on its first use; later remove the fallback "
    "(docs/security.md, 'Rotating secrets')"
)


class Command(BaseCommand):
    help = (
        "Embedded default: make a new Django secret, keeping the old one as a fallback "
        "(then restart `manage.py serve`); --finish drops the fallback. From the environment: "
        + _HOW
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--finish",
            action="store_true",
            help="drop the old secrets: what only they signed or digested stops working",
        )

    def handle(self, *args, finish: bool, **opts) -> None:
        folder = Path(settings.DATA_DIR)
        current = folder / install_secrets.SECRET_KEY_FILE
        if not current.exists() or install_secrets.read_file(current) != settings.SECRET_KEY:
            raise CommandError(f"the secret comes from the environment: {_HOW}")
        fallbacks = folder / install_secrets.SECRET_KEY_FALLBACKS_FILE
        if finish:
            fallbacks.unlink(missing_ok=True)
            self.stdout.write("done: only the current secret is accepted after a restart")
            return
        earlier = install_secrets.read_file(fallbacks).splitlines() if fallbacks.exists() else []
        install_secrets.replace_file(fallbacks, "\n".join([settings.SECRET_KEY, *earlier]))
        install_secrets.replace_file(current, install_secrets.new_secret())
        self.stdout.write(
            f"done: a new secret is in {current}, the old one in {fallbacks}; restart the "
            "service. API keys move to the new secret on their first use; run this again "
            "with --finish once they have"
        )
