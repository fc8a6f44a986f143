from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("training_sessions", "0011_recovery_group_broken"),
    ]

    operations = [
        migrations.AddField(
            model_name="operation",
            name="api_key",
            field=models.CharField(blank=True, default="", max_length=32),
        ),
    ]
