"""The budgets app."""

from django.apps import AppConfig


class BudgetsConfig(AppConfig):
    name = "controlplane.budgets"
    label = "budgets"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_save

        from controlplane import process_cache
        from controlplane.kms.master_rotation import register_rewrapper

        from .models import Budget
        from .webhook_secrets import secrets_rewrap

        # whether a tenant has hard budgets is cached per process: any change empties the caches
        post_save.connect(process_cache.changed, sender=Budget, dispatch_uid="budgets-cache")
        post_delete.connect(process_cache.changed, sender=Budget, dispatch_uid="budgets-cache-d")
        register_rewrapper("budget webhook secrets", secrets_rewrap)
