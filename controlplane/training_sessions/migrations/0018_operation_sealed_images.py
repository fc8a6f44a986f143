from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("training_sessions", "0017_recorded_sample_images"),
    ]

    operations = [
        migrations.AddField(
            model_name="operation",
            name="sealed_images",
            field=models.BinaryField(blank=True, default=b""),
        ),
    ]
