"""Register (or remove) the S3 locations a tenant's sessions may keep checkpoints in."""

from controlplane.tenants.models import StorageLocation
from controlplane.tenants.services import storage_location_deregister, storage_location_register

from ..account_lists import AccountListCommand


class Command(AccountListCommand):
    help = (
        "List, --add or --remove the s3://bucket[/prefix] locations of --account. A session's "
        "s3_output_path must lie inside one of its account's locations."
    )
    metavar, model, field = "S3_URI", StorageLocation, "uri"
    added_action, removed_action = "storage:RegisterLocation", "storage:DeregisterLocation"

    @staticmethod
    def register(tenant, entry: str, description: str) -> None:
        storage_location_register(tenant=tenant, uri=entry, description=description)

    @staticmethod
    def deregister(tenant, entry: str) -> None:
        storage_location_deregister(tenant=tenant, uri=entry)
