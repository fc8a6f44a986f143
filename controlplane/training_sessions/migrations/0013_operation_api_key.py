from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("training_sessions", "0012_recorded_samples"),
    ]

    operations = [
        migrations.AddField(
            model_name="operation",
            name="api_key",
            field=models.CharField(blank=True, default="", max_length=32),
        ),
    ]
