"""Builds the daily usage rollup from the usage rows already recorded."""

from datetime import UTC

from django.db import migrations
from django.db.models import Sum
from django.db.models.functions import TruncDate

BATCH = 5000


def build(apps, schema_editor) -> None:
    UsageRecord = apps.get_model("metering", "UsageRecord")
    UsageDaily = apps.get_model("metering", "UsageDaily")
    UsageDaily.objects.all().delete()
    groups = (
        UsageRecord.objects.annotate(day=TruncDate("occurred_at", tzinfo=UTC))
        .values("tenant_id", "day", "session_id", "base_model", "meter")
        .annotate(q=Sum("quantity"))
        .order_by()
    )
    batch = []
    for g in groups.iterator(chunk_size=BATCH):
        batch.append(
            UsageDaily(
                tenant_id=g["tenant_id"],
                day=g["day"],
                session_id=g["session_id"] or "",
                base_model=g["base_model"],
                meter=g["meter"],
                quantity=g["q"],
            )
        )
        if len(batch) >= BATCH:
            UsageDaily.objects.bulk_create(batch)
            batch = []
    UsageDaily.objects.bulk_create(batch)


def drop(apps, schema_editor) -> None:
    apps.get_model("metering", "UsageDaily").objects.all().delete()


class Migration(migrations.Migration):
    dependencies = [("metering", "0003_usage_daily")]

    operations = [migrations.RunPython(build, drop)]
