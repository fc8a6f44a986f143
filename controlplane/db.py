"""Database helpers shared by the apps."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection, transaction


@contextmanager
def flush_later() -> Iterator[None]:
    """A transaction whose commit does not wait for its log to reach the disk (PostgreSQL's
    ``synchronous_commit`` off): it is durable once any later commit flushes, or within a
    fraction of a second, and is lost only if the database server itself crashes before that.
    For writes worth less than a disk flush (counters, audit rows, claims the worker also
    remembers). Inside an enclosing transaction it changes nothing: that one's commit decides.
    """
    enclosed = connection.in_atomic_block
    with transaction.atomic():
        if not enclosed and connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL synchronous_commit TO OFF")
        yield
