from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("training_sessions", "0012_recorded_samples"),
    ]

    operations = [
        migrations.AddField(
            model_name="trainingmodel",
            name="queued_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="trainingmodel",
            name="ended_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddIndex(
            model_name="trainingmodel",
            index=models.Index(fields=["base_model", "-ended_at"], name="model_ended_idx"),
        ),
    ]
