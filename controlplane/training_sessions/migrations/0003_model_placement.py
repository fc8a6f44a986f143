import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0002_worker_networks"),
        ("training_sessions", "0002_operation_kind_missing"),
    ]

    operations = [
        migrations.AddField(
            model_name="trainingmodel",
            name="placement",
            field=models.CharField(
                choices=[
                    ("placed", "Placed"),
                    ("waiting_for_worker", "Waiting For Worker"),
                    ("waiting_for_capacity", "Waiting For Capacity"),
                    ("waiting_for_network", "Waiting For Network"),
                    ("never_placed", "Never Placed"),
                ],
                default="placed",
                max_length=32,
            ),
        ),
        migrations.AddField(
            model_name="trainingmodel",
            name="status_reason",
            field=models.TextField(blank=True),
        ),
        migrations.AddField(
            model_name="trainingmodel",
            name="placed_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="trainingmodel",
            name="worker",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="models",
                to="fleet.worker",
            ),
        ),
        migrations.AlterField(
            model_name="operation",
            name="worker",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="operations",
                to="fleet.worker",
            ),
        ),
        migrations.AddIndex(
            model_name="trainingmodel",
            index=models.Index(fields=["placement", "created_at"], name="model_placement_idx"),
        ),
    ]
