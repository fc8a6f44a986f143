"""Create an access key pair for a member or an IAM role of an account and print it (the secret
is shown once). Run by an operator of the service, so no IAM check applies; the audit log
records it as the operator's. Keys made through the API or the dashboard are checked
(``iam:CreateAccessKey``, and a role's trust policy must name the caller)."""

import json

from django.core.management.base import BaseCommand, CommandError

from controlplane.access_keys.services import OPERATOR, access_key_create
from controlplane.errors import DomainError
from controlplane.iam.selectors import role_get
from controlplane.tenants.models import Tenant
from controlplane.tenants.selectors import membership_get


class Command(BaseCommand):
    help = (
        "Create an access key pair (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY) for a user "
        "(--user EMAIL) or a role (--role NAME) of --account."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--account", required=True, help="the tenant's 12-digit account id")
        who = parser.add_mutually_exclusive_group(required=True)
        who.add_argument("--user", help="a member's email")
        who.add_argument("--role", help="a role's name")
        parser.add_argument("--name", default="cli", help="a label for the key")
        parser.add_argument("--expires-in-days", type=int, default=None)
        parser.add_argument(
            "--json",
            action="store_true",
            help='print {"access_key_id": ..., "secret_access_key": ...}',
        )

    def handle(self, *args, **opts) -> None:
        tenant = Tenant.objects.filter(account_id=opts["account"]).first()
        if tenant is None:
            raise CommandError(f"no account {opts['account']}")
        try:
            if opts["role"]:
                owner = {"role": role_get(tenant=tenant, name=opts["role"])}
            else:
                owner = {"user": membership_get(tenant=tenant, username=opts["user"]).user}
            key, secret = access_key_create(
                tenant=tenant,
                actor=OPERATOR,
                name=opts["name"],
                expires_in_days=opts["expires_in_days"],
                **owner,
            )
        except DomainError as exc:
            raise CommandError(exc.detail) from None
        if opts["json"]:
            self.stdout.write(
                json.dumps({"access_key_id": key.access_key_id, "secret_access_key": secret})
            )
        else:
            self.stdout.write(
                f"AWS_ACCESS_KEY_ID={key.access_key_id}\nAWS_SECRET_ACCESS_KEY={secret}"
            )
