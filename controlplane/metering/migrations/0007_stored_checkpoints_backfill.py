"""The storage meter's spans for the checkpoints stored before it (billed from its first run)."""

from django.db import migrations


def backfill(apps, schema_editor) -> None:
    Checkpoint = apps.get_model("training_sessions", "Checkpoint")
    StoredObject = apps.get_model("metering", "StoredObject")
    rows = []
    for ckpt in Checkpoint.objects.select_related("model").iterator(chunk_size=2000):
        manifest = ckpt.manifest if isinstance(ckpt.manifest, dict) else {}
        sizes = [int(e.get("size") or 0) for e in manifest.values() if isinstance(e, dict)]
        rows.append(
            StoredObject(
                tenant_id=ckpt.tenant_id,
                session_id=ckpt.model.session_id,
                base_model=ckpt.base_model,
                checkpoint_id=ckpt.pk,
                size_bytes=sum(sizes) if sizes else int(ckpt.size_bytes or 0),
                stored_from=ckpt.created_at,
            )
        )
    StoredObject.objects.bulk_create(rows, batch_size=2000)


class Migration(migrations.Migration):
    dependencies = [
        ("metering", "0006_storage_meter"),
        ("training_sessions", "0015_operation_api_key"),
    ]

    operations = [migrations.RunPython(backfill, migrations.RunPython.noop)]
