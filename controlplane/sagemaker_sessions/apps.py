from django.apps import AppConfig


class SagemakerSessionsConfig(AppConfig):
    name = "controlplane.sagemaker_sessions"
    label = "sagemaker_sessions"
    default_auto_field = "django.db.models.BigAutoField"
