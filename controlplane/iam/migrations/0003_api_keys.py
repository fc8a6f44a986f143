"""API keys become IAM's. Only Django's idea of the model moves: the table stays
``tenants_apikey`` with its rows, columns, indexes and constraints as they are (nothing is copied),
and the key model's content type is renamed so that its id (and anything pointing at it) stays."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def move_content_type(apps, schema_editor, *, source: str, target: str) -> None:
    ContentType = apps.get_model("contenttypes", "ContentType")
    if not ContentType.objects.filter(app_label=target, model="apikey").exists():
        ContentType.objects.filter(app_label=source, model="apikey").update(app_label=target)


def to_iam(apps, schema_editor):
    move_content_type(apps, schema_editor, source="tenants", target="iam")


def to_tenants(apps, schema_editor):
    move_content_type(apps, schema_editor, source="iam", target="tenants")


class Migration(migrations.Migration):
    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("iam", "0002_user_policies"),
        ("tenants", "0004_storage_locations"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="ApiKey",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("name", models.CharField(max_length=200)),
                        ("prefix", models.CharField(max_length=32, unique=True)),
                        ("digest", models.CharField(max_length=64)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("last_used_at", models.DateTimeField(blank=True, null=True)),
                        ("expires_at", models.DateTimeField(blank=True, null=True)),
                        ("revoked_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "role",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="api_keys",
                                to="iam.role",
                            ),
                        ),
                        (
                            "tenant",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="api_keys",
                                to="tenants.tenant",
                            ),
                        ),
                        (
                            "user",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="api_keys",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "db_table": "tenants_apikey",
                        "constraints": [
                            models.CheckConstraint(
                                condition=models.Q(
                                    models.Q(("role__isnull", True), ("user__isnull", False)),
                                    models.Q(("role__isnull", False), ("user__isnull", True)),
                                    _connector="OR",
                                ),
                                name="api_key_has_one_principal",
                            )
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(to_iam, to_tenants),
    ]
