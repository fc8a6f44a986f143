from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="worker",
            name="subnet_ids",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AddField(
            model_name="worker",
            name="security_group_ids",
            field=models.JSONField(blank=True, default=list),
        ),
    ]
