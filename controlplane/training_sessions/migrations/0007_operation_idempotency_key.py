# A client's key for a request it may send again (the OpenAI endpoints' Idempotency-Key), unique per tenant.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('fleet', '0002_worker_networks'),
        ('tenants', '0004_storage_locations'),
        ('training_sessions', '0006_operation_notices'),
    ]

    operations = [
        migrations.AddField(
            model_name='operation',
            name='idempotency_key',
            field=models.CharField(blank=True, max_length=300, null=True),
        ),
        migrations.AddConstraint(
            model_name='operation',
            constraint=models.UniqueConstraint(condition=models.Q(('idempotency_key__isnull', False)), fields=('tenant', 'idempotency_key'), name='uniq_op_idempotency_key'),
        ),
    ]
