"""Delete KMS keys whose scheduled deletion date has passed (the janitor also does this)."""

from django.core.management.base import BaseCommand

from controlplane.kms.services import keys_purge


class Command(BaseCommand):
    help = (
        "Delete keys pending deletion whose date has passed; what they sealed becomes unreadable."
    )

    def handle(self, *args, **opts) -> None:
        for arn in keys_purge():
            self.stdout.write(f"deleted {arn}")
