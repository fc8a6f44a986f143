"""Run the housekeeping sweep once, or forever (for cron or a sidecar container)."""

import threading

from django.core.management.base import BaseCommand

from controlplane.housekeeping.janitor import run_forever, sweep


class Command(BaseCommand):
    help = "Expire idle sessions; --loop keeps sweeping every --every seconds."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--loop", action="store_true")
        parser.add_argument("--every", type=float, default=15.0)

    def handle(self, *args, **opts) -> None:
        if opts["loop"]:
            run_forever(threading.Event(), opts["every"])
        else:
            self.stdout.write(str(sweep()))
