# The client's finish reason is the training_sessions app's now (its migration 0016 took the
# table over): this app forgets the model and leaves the table alone.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("api", "0001_session_finish"),
        ("training_sessions", "0016_session_finish"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="SessionFinish")],
            database_operations=[],
        ),
    ]
