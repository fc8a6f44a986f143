"""The quotas app."""

from django.apps import AppConfig


class QuotasConfig(AppConfig):
    name = "controlplane.quotas"
    label = "quotas"

    def ready(self) -> None:
        from django.core.signals import setting_changed
        from django.db.models.signals import post_delete, post_save

        from controlplane import process_cache

        from .models import TenantQuota

        # A tenant's cached limits come from its quota row: any change empties the caches.
        post_save.connect(process_cache.changed, sender=TenantQuota, dispatch_uid="quotas-cache")
        post_delete.connect(
            process_cache.changed, sender=TenantQuota, dispatch_uid="quotas-cache-del"
        )
        # Default limits come from settings; a changed setting (in tests) must be seen too.
        setting_changed.connect(
            lambda **_: process_cache.clear(), weak=False, dispatch_uid="quotas-cache-settings"
        )
