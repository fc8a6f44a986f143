"""Create an API key for a member or an IAM role of an account; print it (shown once).

Run by an operator of the service, so no IAM check applies; keys made through the API are
checked (``iam:CreateApiKey``, and a role's trust policy must name the caller).
"""

from django.core.management.base import BaseCommand, CommandError

from controlplane.audit.services import audit_operator
from controlplane.errors import DomainError
from controlplane.iam.resources import api_key_arn
from controlplane.iam.selectors import role_get
from controlplane.iam.services import api_key_create
from controlplane.tenants.models import Tenant
from controlplane.tenants.selectors import membership_get


class Command(BaseCommand):
    help = "Create an API key for a user (--user EMAIL) or a role (--role NAME) of --account."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--account", required=True, help="the tenant's 12-digit account id")
        who = parser.add_mutually_exclusive_group(required=True)
        who.add_argument("--user", help="a member's email")
        who.add_argument("--role", help="a role's name")
        parser.add_argument("--name", default="cli", help="a label for the key")
        parser.add_argument("--expires-in-days", type=int, default=None)

    def handle(self, *args, **opts) -> None:
        tenant = Tenant.objects.filter(account_id=opts["account"]).first()
        if tenant is None:
            raise CommandError(f"no account {opts['account']}")
        try:
            if opts["role"]:
                owner = {"role": role_get(tenant=tenant, name=opts["role"])}
            else:
                owner = {"user": membership_get(tenant=tenant, username=opts["user"]).user}
            key, raw = api_key_create(
                tenant=tenant,
                name=opts["name"],
                expires_in_days=opts["expires_in_days"],
                **owner,
            )
        except DomainError as exc:
            raise CommandError(exc.detail) from None
        audit_operator(
            tenant=tenant, action="iam:CreateApiKey", resource=api_key_arn(tenant, key.prefix)
        )
        self.stdout.write(raw)
