from django.apps import AppConfig


class IamConfig(AppConfig):
    name = "controlplane.iam"
    label = "iam"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib.auth import get_user_model
        from django.core.signals import setting_changed
        from django.db.models.signals import post_delete, post_save

        from controlplane.quotas.models import TenantQuota
        from controlplane.tenants.models import ApiKey, Membership, Tenant

        from . import credential_cache
        from .models import Role, RolePolicy, UserPolicy

        # What an API key resolves to, and a tenant's limits, depend on these rows: any change
        # empties the cache.
        models = (ApiKey, Membership, Tenant, get_user_model(), Role, RolePolicy, UserPolicy)
        for model in (*models, TenantQuota):
            post_save.connect(
                credential_cache.changed, sender=model, dispatch_uid=f"iam-cache-{model.__name__}"
            )
            post_delete.connect(
                credential_cache.changed,
                sender=model,
                dispatch_uid=f"iam-cache-del-{model.__name__}",
            )
        # Default limits come from settings; a changed setting (in tests) must be seen too.
        setting_changed.connect(
            lambda **_: credential_cache.cache.clear(),
            weak=False,
            dispatch_uid="iam-cache-settings",
        )
