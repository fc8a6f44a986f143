"""Register (or remove) the subnets of a tenant's VPC that workers are connected to."""

from django.core.management.base import BaseCommand, CommandError

from controlplane.audit.services import audit_operator
from controlplane.errors import DomainError
from controlplane.tenants.models import Subnet, Tenant
from controlplane.tenants.services import subnet_deregister, subnet_register


class Command(BaseCommand):
    help = (
        "List, --add or --remove the subnets registered to --account. Sessions may only name "
        "their own tenant's subnets in vpc_config."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--account", required=True, help="the tenant's 12-digit account id")
        parser.add_argument("--add", action="append", default=[], metavar="SUBNET_ID")
        parser.add_argument("--remove", action="append", default=[], metavar="SUBNET_ID")
        parser.add_argument("--description", default="")

    def handle(self, *args, **opts) -> None:
        tenant = Tenant.objects.filter(account_id=opts["account"]).first()
        if tenant is None:
            raise CommandError(f"no account {opts['account']}")
        try:
            for subnet in opts["add"]:
                subnet_register(tenant=tenant, subnet_id=subnet, description=opts["description"])
                audit_operator(tenant=tenant, action="vpc:RegisterSubnet", resource=subnet)
            for subnet in opts["remove"]:
                subnet_deregister(tenant=tenant, subnet_id=subnet)
                audit_operator(tenant=tenant, action="vpc:DeregisterSubnet", resource=subnet)
        except DomainError as exc:
            raise CommandError(exc.detail) from None
        for subnet in Subnet.objects.filter(tenant=tenant).order_by("subnet_id"):
            self.stdout.write(f"{subnet.subnet_id}\t{subnet.description}")
