"""The default price of checkpoint storage: $0.10 per GB-month on any base model, from the
start of 2025 (the meter counts millionths of a GB-month, so its price per million is the
price of a GB-month)."""

from datetime import UTC, datetime
from decimal import Decimal

from django.db import migrations

SINCE = datetime(2025, 1, 1, tzinfo=UTC)
DEFAULTS = {"storage_gb_months": Decimal("0.10")}


def seed(apps, schema_editor) -> None:
    PricePoint = apps.get_model("metering", "PricePoint")
    for meter, price in DEFAULTS.items():
        PricePoint.objects.get_or_create(
            base_model="*",
            meter=meter,
            currency="usd",
            effective_from=SINCE,
            defaults={"per_million": price},
        )


def unseed(apps, schema_editor) -> None:
    PricePoint = apps.get_model("metering", "PricePoint")
    PricePoint.objects.filter(base_model="*", effective_from=SINCE, meter__in=DEFAULTS).delete()


class Migration(migrations.Migration):
    dependencies = [("metering", "0007_stored_checkpoints_backfill")]

    operations = [migrations.RunPython(seed, unseed)]
