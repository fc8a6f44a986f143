from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("training_sessions", "0014_context_length"),
    ]

    operations = [
        migrations.AddField(
            model_name="operation",
            name="api_key",
            field=models.CharField(blank=True, default="", max_length=32),
        ),
    ]
