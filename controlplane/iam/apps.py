from django.apps import AppConfig


class IamConfig(AppConfig):
    name = "controlplane.iam"
    label = "iam"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib.auth import get_user_model
        from django.db.models.signals import post_delete, post_save

        from controlplane import process_cache
        from controlplane.tenants.models import Membership, Tenant
        from controlplane.tenants.signals import membership_removed, own_login_event

        from .models import ApiKey, Role, RolePolicy, UserPolicy
        from .own_logins import audit_own_account
        from .services import member_keys_revoke

        own_login_event.connect(audit_own_account, dispatch_uid="iam-own-login-audit")
        membership_removed.connect(member_keys_revoke, dispatch_uid="iam-member-keys-revoke")

        # What an API key resolves to depends on these rows: any change empties the caches.
        for model in (ApiKey, Membership, Tenant, get_user_model(), Role, RolePolicy, UserPolicy):
            post_save.connect(
                process_cache.changed, sender=model, dispatch_uid=f"iam-cache-{model.__name__}"
            )
            post_delete.connect(
                process_cache.changed,
                sender=model,
                dispatch_uid=f"iam-cache-del-{model.__name__}",
            )
