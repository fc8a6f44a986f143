# Checkpoints in storage: their URI, the manifest of stored objects, its digest.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('training_sessions', '0004_checkpoint_kms_key_arn'),
    ]

    operations = [
        migrations.AddField(
            model_name='checkpoint',
            name='manifest',
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='checkpoint',
            name='sha256',
            field=models.CharField(blank=True, max_length=64),
        ),
        migrations.AddField(
            model_name='checkpoint',
            name='storage_uri',
            field=models.CharField(blank=True, max_length=2048),
        ),
        migrations.AlterField(
            model_name='checkpoint',
            name='merged_path',
            field=models.CharField(blank=True, max_length=2048),
        ),
        migrations.AlterField(
            model_name='checkpoint',
            name='storage_path',
            field=models.CharField(max_length=2048),
        ),
        migrations.AlterField(
            model_name='samplingsession',
            name='storage_path',
            field=models.CharField(blank=True, max_length=2048),
        ),
    ]
