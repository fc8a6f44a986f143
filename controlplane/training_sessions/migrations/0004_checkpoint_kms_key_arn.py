from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('training_sessions', '0003_model_placement'),
    ]

    operations = [
        migrations.AddField(
            model_name='checkpoint',
            name='kms_key_arn',
            field=models.CharField(blank=True, max_length=200),
        ),
    ]
