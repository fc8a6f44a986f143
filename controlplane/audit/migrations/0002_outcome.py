from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("audit", "0001_initial")]

    operations = [
        migrations.AddField(
            model_name="auditevent",
            name="outcome",
            field=models.CharField(
                blank=True,
                choices=[("succeeded", "Succeeded"), ("failed", "Failed")],
                default="",
                max_length=16,
            ),
        ),
        migrations.AddField(
            model_name="auditevent",
            name="error",
            field=models.CharField(blank=True, default="", max_length=1000),
        ),
    ]
