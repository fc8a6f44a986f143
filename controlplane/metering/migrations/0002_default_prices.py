"""Default prices for every meter on any base model, in force from the start of 2025."""

from datetime import UTC, datetime
from decimal import Decimal

from django.db import migrations

SINCE = datetime(2025, 1, 1, tzinfo=UTC)
DEFAULTS = {
    "train_tokens": Decimal("0.30"),
    "forward_tokens": Decimal("0.10"),
    "prefill_tokens": Decimal("0.10"),
    "sampled_tokens": Decimal("0.25"),
}


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
    dependencies = [("metering", "0001_initial")]

    operations = [migrations.RunPython(seed, unseed)]
