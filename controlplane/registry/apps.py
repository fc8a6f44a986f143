from django.apps import AppConfig


class RegistryConfig(AppConfig):
    name = "controlplane.registry"
    label = "registry"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from controlplane.training_sessions import selectors as sessions

        from .selectors import package_checkpoint_path

        # A checkpoint may be named by the model package version that holds it.
        sessions.version_paths_from(package_checkpoint_path)
