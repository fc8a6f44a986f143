"""The server's master key and AWS KMS client, from settings, and the provider for a key."""

from __future__ import annotations

import threading
from typing import Any

from django.conf import settings

from .keyring import KeyProvider, KeyRef, MasterKey, provider_for

_lock = threading.Lock()
_masters: dict[tuple[str, str | None], MasterKey] = {}
_clients: dict[tuple[str | None, str], Any] = {}


def master_key() -> MasterKey:
    """The service's KMS master key: ``KMS_MASTER_KEY`` stretched to an AES key (derived once
    per secret), opening also what ``KMS_MASTER_KEY_PREVIOUS`` wrapped while a rotation runs.
    The one accessor for everything the service seals for itself (``MasterKey.seal``); whatever
    is sealed with it registers its re-wrapping in ``master_rotation``."""
    secrets = (settings.KMS_MASTER_KEY, settings.KMS_MASTER_KEY_PREVIOUS)
    with _lock:
        if secrets not in _masters:
            _masters[secrets] = MasterKey(*secrets)
        return _masters[secrets]


def aws_client() -> Any:
    """A boto3 KMS client for ``KMS_AWS_ENDPOINT_URL`` / ``KMS_AWS_REGION`` (shared: thread-safe)."""
    import boto3

    where = (settings.KMS_AWS_ENDPOINT_URL or None, settings.KMS_AWS_REGION)
    with _lock:
        if where not in _clients:
            _clients[where] = boto3.client("kms", endpoint_url=where[0], region_name=where[1])
        return _clients[where]


def aws_clients_close() -> None:
    """Close and forget the cached AWS clients (their endpoint or credentials changed)."""
    with _lock:
        clients = list(_clients.values())
        _clients.clear()
    for client in clients:
        client.close()


def provider(key: KeyRef) -> KeyProvider:
    """The provider that issues and opens data keys under ``key``."""
    return provider_for(key, master=master_key(), aws_client_factory=aws_client)
