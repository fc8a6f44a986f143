"""The shape of the operator commands that list, add and remove what an account owns (its VPC
subnets, its S3 locations); each add and removal leaves an audit row."""

from __future__ import annotations

from collections.abc import Callable

from django.core.management.base import BaseCommand, CommandError

from controlplane.audit.services import audit_operator
from controlplane.errors import DomainError
from controlplane.tenants.models import Tenant


class AccountListCommand(BaseCommand):
    metavar: str
    model: type
    field: str  # the model's field that names an entry
    register: Callable
    deregister: Callable
    added_action: str
    removed_action: str

    def add_arguments(self, parser) -> None:
        parser.add_argument("--account", required=True, help="the tenant's 12-digit account id")
        parser.add_argument("--add", action="append", default=[], metavar=self.metavar)
        parser.add_argument("--remove", action="append", default=[], metavar=self.metavar)
        parser.add_argument("--description", default="")

    def handle(self, *args, **opts) -> None:
        tenant = Tenant.objects.filter(account_id=opts["account"]).first()
        if tenant is None:
            raise CommandError(f"no account {opts['account']}")
        register, deregister = type(self).register, type(self).deregister
        try:
            for entry in opts["add"]:
                register(tenant, entry, opts["description"])
                audit_operator(tenant=tenant, action=self.added_action, resource=entry)
            for entry in opts["remove"]:
                deregister(tenant, entry)
                audit_operator(tenant=tenant, action=self.removed_action, resource=entry)
        except DomainError as exc:
            raise CommandError(exc.detail) from None
        for row in self.model.objects.filter(tenant=tenant).order_by(self.field):
            self.stdout.write(f"{getattr(row, self.field)}\t{row.description}")
