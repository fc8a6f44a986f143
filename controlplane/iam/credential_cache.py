"""What an API key resolves to (its row, its principal and the principal's policies), kept in
each control-plane process for a few seconds. ``controlplane.process_cache`` says when it is used
and how every process forgets it when a key, a membership, a user, a role, a tenant or an inline
policy changes (``IamConfig.ready`` connects those models)."""

from __future__ import annotations

from django.utils import timezone

from controlplane.process_cache import CHANNEL, ProcessCache

__all__ = ["CHANNEL", "CredentialCache", "cache"]


class CredentialCache:
    """An API key's digest → (its row, its principal)."""

    def __init__(self) -> None:
        self._entries = ProcessCache()

    @property
    def generation(self) -> int:
        return self._entries.generation

    def get(self, digest: str):
        """(key, principal) for a key digest, if cached, fresh and the key not yet expired."""
        found = self._entries.get(digest)
        if found is None:
            return None
        if _expired(found[0]):
            self._entries.forget(digest)
            return None
        return found

    def put(self, digest: str, generation: int, key, principal) -> None:
        """Remember a lookup that began at ``generation``, unless something changed since."""
        self._entries.put(digest, generation, (key, principal))

    def clear(self) -> None:
        """Forget this cache and every other one of ``process_cache`` (one generation)."""
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


def _expired(key) -> bool:
    return key.revoked_at is not None or (
        key.expires_at is not None and key.expires_at <= timezone.now()
    )


cache = CredentialCache()
