from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("training_sessions", "0013_model_queue_times"),
    ]

    operations = [
        migrations.AddField(
            model_name="trainingmodel",
            name="context_length",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="samplingsession",
            name="context_length",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
    ]
