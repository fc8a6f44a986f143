from django.apps import AppConfig


class TrainingSessionsConfig(AppConfig):
    name = "controlplane.training_sessions"
    label = "training_sessions"

    def ready(self) -> None:
        from controlplane import process_cache

        from .notify import listener

        # This process's notice listener also hears the changes that empty the caches of
        # access rows (API keys' principals, tenants' limits).
        process_cache.listen_with(listener.ensure_listening)
