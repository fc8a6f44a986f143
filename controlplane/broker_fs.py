"""The embedded broker: kombu's filesystem transport, with messages that appear whole.

kombu's own ``_put`` creates the message file and then writes it, so a consumer polling the
folder can pick up an empty file and die on it; its ``_get`` moves a message into the shared
system temporary folder before reading it. Here each message is written under a name no consumer
looks at and renamed into place, and a consumer claims a message by renaming it into a folder of
its own next to the queue, reads it there and deletes it (renames are atomic on one filesystem,
so two consumers never both get a message and nobody reads a partial one). The exchange
tables in the control folder are likewise replaced whole under a lock of their own: kombu
truncates a table before it takes its lock, so a publisher could read an empty one.
"""

from __future__ import annotations

import fcntl
import os
import threading
import uuid
from queue import Empty
from time import monotonic

from kombu.transport import TRANSPORT_ALIASES, filesystem, virtual
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads

SCHEME = "lwfs"
_binding_lock = threading.Lock()


class Channel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        partial = os.path.join(self.data_folder_out, f".partial-{uuid.uuid4()}")
        with open(partial, "wb") as f:
            f.write(str_to_bytes(dumps(payload)))
        os.replace(partial, os.path.join(self.data_folder_out, name))

    def _get(self, queue):
        wanted = f"{queue}.msg"
        claimed = os.path.join(self.data_folder_in, ".claimed")
        os.makedirs(claimed, exist_ok=True)
        for filename in sorted(os.listdir(self.data_folder_in)):
            if filename.partition(".")[2] != wanted:
                continue
            mine = os.path.join(claimed, f"{uuid.uuid4()}-{filename}")
            try:
                os.rename(os.path.join(self.data_folder_in, filename), mine)
            except FileNotFoundError:
                continue  # another consumer claimed it first
            with open(mine, "rb") as f:
                payload = f.read()
            os.unlink(mine)
            return loads(bytes_to_str(payload))
        raise Empty()

    def queue_bind(self, *args, **kwargs):
        # kombu records a binding in the process-wide broker state before it writes the table
        # file; another thread that sees the binding must not publish before the file has it.
        with _binding_lock:
            super().queue_bind(*args, **kwargs)

    def _queue_bind(self, exchange, routing_key, pattern, queue):
        binding = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        self._edit_table(exchange, lambda table: table if binding in table else [binding, *table])

    def _delete(self, queue, exchange, routing_key, pattern, *args, **kwargs):
        virtual.Channel._delete(self, queue, exchange, routing_key, pattern, *args, **kwargs)
        binding = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        self._edit_table(exchange, lambda table: [b for b in table if b != binding])

    def _edit_table(self, exchange, edit) -> None:
        """Replace ``exchange``'s table file whole, under a lock of its own."""
        table_file = self._exchange_file(exchange)
        self.control_folder.mkdir(exist_ok=True)
        with open(self.control_folder / f".{exchange}.lock", "a") as guard:
            fcntl.flock(guard.fileno(), fcntl.LOCK_EX)  # released when the file closes
            try:
                current = loads(bytes_to_str(table_file.read_bytes()))
            except FileNotFoundError:
                current = []
            table = [filesystem.exchange_queue_t(*q) for q in current]
            edited = edit(table)
            if edited == table and table_file.exists():
                return
            partial = self.control_folder / f".partial-{uuid.uuid4()}"
            partial.write_bytes(str_to_bytes(dumps(edited)))
            os.replace(partial, table_file)


class Transport(filesystem.Transport):
    Channel = Channel


def register() -> str:
    """Make ``lwfs://`` name this transport; returns the URL to use."""
    TRANSPORT_ALIASES[SCHEME] = f"{__name__}:Transport"
    return f"{SCHEME}://"
