"""The embedded broker: kombu's filesystem transport, with messages that appear whole.

kombu's own ``_put`` creates the message file and then writes it, so a consumer polling the
folder can pick up an empty file and die on it. Here each message is written under a name no
consumer looks at and renamed into place (atomic on one filesystem).
"""

from __future__ import annotations

import os
import uuid
from time import monotonic

from kombu.transport import TRANSPORT_ALIASES, filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

SCHEME = "lwfs"


class Channel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        partial = os.path.join(self.data_folder_out, f".partial-{uuid.uuid4()}")
        with open(partial, "wb") as f:
            f.write(str_to_bytes(dumps(payload)))
        os.replace(partial, os.path.join(self.data_folder_out, name))


class Transport(filesystem.Transport):
    Channel = Channel


def register() -> str:
    """Make ``lwfs://`` name this transport; returns the URL to use."""
    TRANSPORT_ALIASES[SCHEME] = f"{__name__}:Transport"
    return f"{SCHEME}://"
