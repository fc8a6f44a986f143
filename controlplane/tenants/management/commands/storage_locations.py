"""Register (or remove) the S3 locations a tenant's sessions may keep checkpoints in."""

from django.core.management.base import BaseCommand, CommandError

from controlplane.audit.services import audit_operator
from controlplane.errors import DomainError
from controlplane.tenants.models import StorageLocation, Tenant
from controlplane.tenants.services import storage_location_deregister, storage_location_register


class Command(BaseCommand):
    help = (
        "List, --add or --remove the s3://bucket[/prefix] locations of --account. A session's "
        "s3_output_path must lie inside one of its account's locations."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--account", required=True, help="the tenant's 12-digit account id")
        parser.add_argument("--add", action="append", default=[], metavar="S3_URI")
        parser.add_argument("--remove", action="append", default=[], metavar="S3_URI")
        parser.add_argument("--description", default="")

    def handle(self, *args, **opts) -> None:
        tenant = Tenant.objects.filter(account_id=opts["account"]).first()
        if tenant is None:
            raise CommandError(f"no account {opts['account']}")
        try:
            for uri in opts["add"]:
                storage_location_register(tenant=tenant, uri=uri, description=opts["description"])
                audit_operator(tenant=tenant, action="storage:RegisterLocation", resource=uri)
            for uri in opts["remove"]:
                storage_location_deregister(tenant=tenant, uri=uri)
                audit_operator(tenant=tenant, action="storage:DeregisterLocation", resource=uri)
        except DomainError as exc:
            raise CommandError(exc.detail) from None
        for location in StorageLocation.objects.filter(tenant=tenant).order_by("uri"):
            self.stdout.write(f"{location.uri}\t{location.description}")
