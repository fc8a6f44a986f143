"""Create a tenant with its owner, its session role and an API key; print the key (shown once)."""

import json
import os

from django.core.management.base import BaseCommand, CommandError

from controlplane.errors import DomainError
from controlplane.iam.provisioning import account_create


class Command(BaseCommand):
    help = (
        "Create a tenant, its owner and the role sessions run as (LoopwrightSessionRole), and an "
        "API key for the owner. Prints the key on stdout (or everything as JSON with --json)."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--name", required=True, help="the tenant's name")
        parser.add_argument("--owner-email", help="the owner's login (default: owner@<name>.local)")
        parser.add_argument(
            "--password-env",
            help="read the owner's password from this environment variable "
            "(without it the owner logs in only after a password reset; keys still work)",
        )
        parser.add_argument("--key-name", default="default", help="a label for the key")
        parser.add_argument("--json", action="store_true", help="print a JSON object")

    def handle(self, *args, **opts) -> None:
        email = opts["owner_email"] or f"owner@{_slug(opts['name'])}.local"
        password = os.environ.get(opts["password_env"]) if opts["password_env"] else None
        if opts["password_env"] and not password:
            raise CommandError(f"{opts['password_env']} is not set")
        try:
            account = account_create(
                email=email, password=password, tenant_name=opts["name"], key_name=opts["key_name"]
            )
        except DomainError as exc:
            raise CommandError(exc.detail) from None
        tenant, role, raw = account.membership.tenant, account.session_role, account.api_key
        if opts["json"]:
            self.stdout.write(
                json.dumps(
                    {
                        "account_id": tenant.account_id,
                        "tenant_name": tenant.name,
                        "owner": email,
                        "owner_arn": account.owner_arn,
                        "session_role_arn": role.arn,
                        "api_key": raw,
                    }
                )
            )
            return
        self.stderr.write(
            f"tenant {tenant.name} (account {tenant.account_id}), owner {email}\n"
            f"session role: {role.arn}\nAPI key (shown once):"
        )
        self.stdout.write(raw)


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-") or "tenant"
