from django.apps import AppConfig


class KmsConfig(AppConfig):
    name = "controlplane.kms"
    label = "kms"
    default_auto_field = "django.db.models.BigAutoField"
