"""Usage rows and their daily totals say which key made each operation (rows recorded before
keep ""), and a meter for checkpoint storage."""

from django.db import migrations, models

METERS = [
    ("train_tokens", "Train Tokens"),
    ("forward_tokens", "Forward Tokens"),
    ("prefill_tokens", "Prefill Tokens"),
    ("sampled_tokens", "Sampled Tokens"),
    ("storage_gb_months", "Storage Gb Months"),
]


class Migration(migrations.Migration):
    dependencies = [
        ("metering", "0004_usage_daily_backfill"),
    ]

    operations = [
        migrations.AddField(
            model_name="usagerecord",
            name="api_key",
            field=models.CharField(blank=True, default="", max_length=32),
        ),
        migrations.AddField(
            model_name="usagedaily",
            name="api_key",
            field=models.CharField(blank=True, default="", max_length=32),
        ),
        migrations.RemoveConstraint(model_name="usagedaily", name="uniq_usage_daily"),
        migrations.AddConstraint(
            model_name="usagedaily",
            constraint=models.UniqueConstraint(
                fields=("tenant", "day", "session_id", "api_key", "base_model", "meter"),
                name="uniq_usage_daily_key",
            ),
        ),
        migrations.AddIndex(
            model_name="usagerecord",
            index=models.Index(
                fields=["tenant", "api_key", "occurred_at"], name="usage_key_time_idx"
            ),
        ),
        migrations.AddIndex(
            model_name="usagedaily",
            index=models.Index(
                fields=["tenant", "session_id", "day"], name="usage_daily_session_idx"
            ),
        ),
        migrations.AddIndex(
            model_name="usagedaily",
            index=models.Index(fields=["tenant", "api_key", "day"], name="usage_daily_key_idx"),
        ),
        migrations.AlterField(
            model_name="usagerecord",
            name="meter",
            field=models.CharField(choices=METERS, max_length=32),
        ),
        migrations.AlterField(
            model_name="usagedaily",
            name="meter",
            field=models.CharField(choices=METERS, max_length=32),
        ),
        migrations.AlterField(
            model_name="pricepoint",
            name="meter",
            field=models.CharField(choices=METERS, max_length=32),
        ),
    ]
