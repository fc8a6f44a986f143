"""Show or change one account's quotas (concurrent sessions, requests per minute, monthly token
budget, replicas per training model, bytes of recorded sampled sequences)."""

from __future__ import annotations

from argparse import SUPPRESS

from django.core.management.base import BaseCommand, CommandError

from controlplane.audit.services import audit_operator
from controlplane.errors import DomainError
from controlplane.quotas.services import quota_set
from controlplane.tenants.models import Tenant


def _limit(value: str) -> int | None:
    """A number, or ``default`` to go back to the setting's value."""
    if value == "default":
        return None
    try:
        return int(value)
    except ValueError:
        raise CommandError(f"{value!r} is not a number or 'default'") from None


class Command(BaseCommand):
    help = (
        "Override --account's quotas; 'default' goes back to the settings "
        "(LOOPWRIGHT_MAX_CONCURRENT_SESSIONS, LOOPWRIGHT_REQUESTS_PER_MINUTE, "
        "LOOPWRIGHT_MONTHLY_TOKEN_BUDGET, LOOPWRIGHT_MAX_REPLICAS, LOOPWRIGHT_MAX_RECORDED_BYTES). "
        "Prints the effective limits."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--account", required=True, help="the tenant's 12-digit account id")
        parser.add_argument(
            "--concurrent-sessions", type=_limit, metavar="N|default", default=SUPPRESS
        )
        parser.add_argument(
            "--requests-per-minute", type=_limit, metavar="N|default", default=SUPPRESS
        )
        parser.add_argument(
            "--monthly-token-budget", type=_limit, metavar="N|default", default=SUPPRESS
        )
        parser.add_argument("--max-replicas", type=_limit, metavar="N|default", default=SUPPRESS)
        parser.add_argument("--recorded-bytes", type=_limit, metavar="N|default", default=SUPPRESS)

    def handle(self, *args, **opts) -> None:
        tenant = Tenant.objects.filter(account_id=opts["account"]).first()
        if tenant is None:
            raise CommandError(f"no account {opts['account']}")
        names = (
            "concurrent_sessions",
            "requests_per_minute",
            "monthly_token_budget",
            "max_replicas",
            "recorded_bytes",
        )
        changes = {k: opts[k] for k in names if k in opts}
        try:
            limits = quota_set(tenant=tenant, **changes)
        except DomainError as exc:
            raise CommandError(exc.detail) from None
        if changes:
            reason = ", ".join(f"{k}={'default' if v is None else v}" for k, v in changes.items())
            audit_operator(
                tenant=tenant,
                action="quotas:SetQuota",
                resource=f"account/{tenant.account_id}",
                reason=f"set by an operator from the command line: {reason}",
            )
        self.stdout.write(f"concurrent_sessions\t{limits.concurrent_sessions}")
        self.stdout.write(f"requests_per_minute\t{limits.requests_per_minute}")
        budget = limits.monthly_token_budget
        self.stdout.write(f"monthly_token_budget\t{'unlimited' if budget is None else budget}")
        self.stdout.write(f"max_replicas\t{limits.max_replicas}")
        self.stdout.write(f"recorded_bytes\t{limits.recorded_bytes}")
