"""Create an IAM role from JSON policy files; print its ARN."""

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from controlplane.audit.services import audit_operator
from controlplane.errors import DomainError
from controlplane.iam.services import role_create
from controlplane.tenants.models import Tenant


class Command(BaseCommand):
    help = (
        "Create a role in --account with a trust policy (default: the sessions service may "
        "assume it) and inline permission policies: --policy NAME=FILE.json, repeatable."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--account", required=True, help="the tenant's 12-digit account id")
        parser.add_argument("--name", required=True)
        parser.add_argument("--description", default="")
        parser.add_argument("--trust-policy", help="a JSON file with the trust policy")
        parser.add_argument("--policy", action="append", default=[], metavar="NAME=FILE")

    def handle(self, *args, **opts) -> None:
        tenant = Tenant.objects.filter(account_id=opts["account"]).first()
        if tenant is None:
            raise CommandError(f"no account {opts['account']}")
        policies = {}
        for spec in opts["policy"]:
            name, sep, file = spec.partition("=")
            if not sep:
                raise CommandError(f"--policy {spec!r}: expected NAME=FILE")
            policies[name] = _load(file)
        trust = _load(opts["trust_policy"]) if opts["trust_policy"] else None
        try:
            role = role_create(
                tenant=tenant,
                actor="system:cli",
                name=opts["name"],
                description=opts["description"],
                trust_policy=trust,
                policies=policies,
            )
        except DomainError as exc:
            raise CommandError(exc.detail) from None
        audit_operator(tenant=tenant, action="iam:CreateRole", resource=role.arn)
        self.stdout.write(role.arn)


def _load(file: str):
    try:
        return json.loads(Path(file).read_text())
    except (OSError, ValueError) as exc:
        raise CommandError(f"{file}: {exc}") from None
