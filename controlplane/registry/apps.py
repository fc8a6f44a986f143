from django.apps import AppConfig


class RegistryConfig(AppConfig):
    name = "controlplane.registry"
    label = "registry"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from controlplane.training_sessions import selectors as sessions
        from controlplane.training_sessions.services import retention

        from .lifecycle import approved_kept
        from .selectors import package_checkpoint_path

        # A checkpoint may be named by the model package version that holds it.
        sessions.version_paths_from(package_checkpoint_path)
        # An approved version's weights outlive their expiry (unless its group says otherwise).
        retention.protection_from(approved_kept)
