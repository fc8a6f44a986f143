from django.apps import AppConfig

# what a checkpoint's save may change of what it stores (a save naming none of these, such as
# a new expiry, changes nothing the storage meter counts)
_STORED_FIELDS = frozenset({"storage_path", "manifest", "size_bytes", "storage_uri"})


def _saved(sender, instance, created, update_fields=None, **kwargs) -> None:
    from .storage import checkpoint_stored

    if created or update_fields is None or _STORED_FIELDS & set(update_fields):
        checkpoint_stored(instance)


def _deleted(sender, instance, **kwargs) -> None:
    from .storage import checkpoint_gone

    checkpoint_gone(instance.pk)


class MeteringConfig(AppConfig):
    name = "controlplane.metering"
    label = "metering"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_save

        from controlplane.training_sessions.models import Checkpoint

        # the storage meter's spans follow every checkpoint's saves and its deletion
        post_save.connect(_saved, sender=Checkpoint, dispatch_uid="metering-stored")
        post_delete.connect(_deleted, sender=Checkpoint, dispatch_uid="metering-gone")
