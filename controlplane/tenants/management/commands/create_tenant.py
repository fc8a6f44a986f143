"""Create a tenant with an API key and print the key (shown once)."""

from django.core.management.base import BaseCommand

from controlplane.tenants.services import api_key_create, tenant_create


class Command(BaseCommand):
    help = "Create a tenant and an API key; prints the key on stdout."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--name", required=True, help="the tenant's name")
        parser.add_argument("--key-name", default="default", help="a label for the key")

    def handle(self, *args, **opts) -> None:
        tenant = tenant_create(name=opts["name"])
        _, raw = api_key_create(tenant=tenant, name=opts["key_name"])
        self.stderr.write(f"tenant {tenant.name} ({tenant.id}); API key (shown once):")
        self.stdout.write(raw)
