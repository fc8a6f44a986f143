from django.apps import AppConfig


class AccessKeysConfig(AppConfig):
    name = "controlplane.access_keys"
    label = "access_keys"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_save

        from controlplane import process_cache
        from controlplane.tenants.signals import membership_removed

        from .models import AccessKey
        from .services import member_access_keys_revoke

        membership_removed.connect(
            member_access_keys_revoke, dispatch_uid="access-keys-member-revoke"
        )
        # A key's secret and principal are cached in every process: any change empties them all.
        post_save.connect(process_cache.changed, sender=AccessKey, dispatch_uid="access-key-cache")
        post_delete.connect(
            process_cache.changed, sender=AccessKey, dispatch_uid="access-key-cache-del"
        )
