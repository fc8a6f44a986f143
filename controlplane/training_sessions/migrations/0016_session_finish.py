# A client's finish reason, recorded by the api app until now: the model moves here (its rows
# stay where they are), then its table takes this app's name.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("training_sessions", "0015_operation_api_key"),
        ("api", "0001_session_finish"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="SessionFinish",
                    fields=[
                        (
                            "session",
                            models.OneToOneField(
                                on_delete=django.db.models.deletion.CASCADE,
                                primary_key=True,
                                related_name="client_finish",
                                serialize=False,
                                to="training_sessions.session",
                            ),
                        ),
                        (
                            "reason",
                            models.CharField(
                                choices=[
                                    ("success", "Success"),
                                    ("errored", "Errored"),
                                    ("interrupted", "Interrupted"),
                                ],
                                max_length=16,
                            ),
                        ),
                        ("detail", models.TextField(blank=True)),
                        ("finished_at", models.DateTimeField(auto_now_add=True)),
                    ],
                    options={"db_table": "api_sessionfinish"},
                ),
            ],
            database_operations=[],
        ),
        migrations.AlterModelTable(name="sessionfinish", table=None),
    ]
