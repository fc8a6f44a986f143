"""Register (or remove) the subnets of a tenant's VPC that workers are connected to."""

from controlplane.tenants.models import Subnet
from controlplane.tenants.services import subnet_deregister, subnet_register

from ..account_lists import AccountListCommand


class Command(AccountListCommand):
    help = (
        "List, --add or --remove the subnets registered to --account. Sessions may only name "
        "their own tenant's subnets in vpc_config."
    )
    metavar, model, field = "SUBNET_ID", Subnet, "subnet_id"
    added_action, removed_action = "vpc:RegisterSubnet", "vpc:DeregisterSubnet"

    @staticmethod
    def register(tenant, entry: str, description: str) -> None:
        subnet_register(tenant=tenant, subnet_id=entry, description=description)

    @staticmethod
    def deregister(tenant, entry: str) -> None:
        subnet_deregister(tenant=tenant, subnet_id=entry)
