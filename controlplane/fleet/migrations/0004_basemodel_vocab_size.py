from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('fleet', '0003_worker_lease'),
    ]

    operations = [
        migrations.AddField(
            model_name='basemodel',
            name='vocab_size',
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
    ]
