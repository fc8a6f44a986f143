"""API keys are IAM's now (``iam.0003_api_keys``): the model leaves this app's state only; its
table, ``tenants_apikey``, and its rows stay where they are."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("iam", "0003_api_keys"),
        ("tenants", "0004_storage_locations"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="ApiKey")],
            database_operations=[],
        ),
    ]
