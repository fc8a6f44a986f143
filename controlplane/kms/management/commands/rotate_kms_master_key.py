"""Move the service to a new KMS master key, re-wrapping every key version's material (and all
else sealed with it) under the new one, so that the old one opens nothing (docs/security.md)."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from controlplane import install_secrets
from controlplane.kms.keyring import MasterKey, TamperedError
from controlplane.kms.master_rotation import master_key_rewrap, unopenable

_HOW = (
    "set LOOPWRIGHT_KMS_MASTER_KEY to the new key and LOOPWRIGHT_KMS_MASTER_KEY_PREVIOUS to the "
    "old one in every process, restart them, then run this; afterwards remove "
    "LOOPWRIGHT_KMS_MASTER_KEY_PREVIOUS and restart (docs/security.md, 'Rotating secrets')"
)


class Command(BaseCommand):
    help = (
        "Re-wrap everything the KMS master key wraps under a new one. From the environment: "
        + _HOW
        + ". Embedded default (the key in the data folder): stop `manage.py serve` and run "
        "this; it makes the new key itself."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--check", action="store_true", help="only list what the current key cannot open"
        )

    def handle(self, *args, check: bool, **opts) -> None:
        if check:
            left = unopenable(MasterKey(settings.KMS_MASTER_KEY))
            for name in left:
                self.stdout.write(f"not under the current master key: {name}")
            self.stdout.write(f"{len(left)} key version(s) not yet under the current master key")
            return
        if settings.KMS_MASTER_KEY_PREVIOUS:
            old = MasterKey(settings.KMS_MASTER_KEY_PREVIOUS)
            self._rewrap(old, MasterKey(settings.KMS_MASTER_KEY))
            self.stdout.write(
                "done: remove LOOPWRIGHT_KMS_MASTER_KEY_PREVIOUS and restart every process"
            )
            return
        current = Path(settings.DATA_DIR) / install_secrets.KMS_MASTER_KEY_FILE
        if not current.exists() or install_secrets.read_file(current) != settings.KMS_MASTER_KEY:
            raise CommandError(f"the master key comes from the environment: {_HOW}")
        self._rotate_file(current)

    def _rotate_file(self, current: Path) -> None:
        """The embedded default: a new key beside the old one (kept if a run was interrupted),
        everything re-wrapped under it, then it replaces the old one."""
        upcoming = current.with_name(current.name + ".next")
        install_secrets.write_new(upcoming, install_secrets.new_secret())
        new_secret = install_secrets.read_file(upcoming)
        self._rewrap(MasterKey(settings.KMS_MASTER_KEY), MasterKey(new_secret))
        install_secrets.replace_file(current, new_secret)
        upcoming.unlink()
        self.stdout.write(f"done: the new master key is in {current}; start the service again")

    def _rewrap(self, old: MasterKey, new: MasterKey) -> None:
        try:
            counts = master_key_rewrap(old=old, new=new)
        except TamperedError as exc:
            raise CommandError(str(exc)) from None
        for name, count in counts.items():
            self.stdout.write(f"re-wrapped {count} {name}")
