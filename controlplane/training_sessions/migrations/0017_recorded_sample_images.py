from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("training_sessions", "0016_session_finish"),
    ]

    operations = [
        migrations.AddField(
            model_name="recordedsample",
            name="images",
            field=models.BinaryField(default=b""),
        ),
    ]
