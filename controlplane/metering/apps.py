from django.apps import AppConfig


class MeteringConfig(AppConfig):
    name = "controlplane.metering"
    label = "metering"
    default_auto_field = "django.db.models.BigAutoField"
