"""A worker's settings, parsed in one place: from its ``LOOPWRIGHT_WORKER_*`` environment
variables (``WorkerSettings.from_env``, what the Celery process reads), and written back to them
(``to_env``, what ``python -m workers.run`` hands that process after its flags). Every default
is the field's own, so the command line, the environment and the tests agree.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .base_fit import parse_memory

TINY_MODEL = "loopwright/tiny-byte-llama"
PREFIX = "LOOPWRIGHT_WORKER_"


@dataclass(frozen=True)
class WorkerSettings:
    name: str  # its queue is gpu.<name>; default: the host name
    base_model: str = TINY_MODEL
    device: str = "cpu"
    dtype: str | None = None  # None: float32 on CPU, bfloat16 on an accelerator
    capacity: int = 16
    max_loaded_adapters: int = 16
    sampler_adapters: int = 8  # samplers' adapters kept, also after their session ended
    release_slack_mb: int = 256  # growth after which freed heap goes back to the OS
    scratch_dir: Path | None = None  # plaintext checkpoints in flight; system temp if None
    subnet_ids: tuple[str, ...] = ()  # the VPC subnets it reaches; none: the open network
    security_group_ids: tuple[str, ...] = ()
    snapshot_every_steps: int | None = None  # None: the control plane's settings
    snapshot_every_seconds: float | None = None
    pass_tokens: int = 16384  # most tokens of many sessions' operations in one engine call
    pass_samples: int = 64  # most samples claimed by one pass (round-robin across tenants)
    address: str = ""  # where the other ranks of a replica group it leads reach it
    memory_bytes: int | None = None  # its memory (None: the device's); decides sharding

    def __post_init__(self) -> None:
        for field in _AT_LEAST_ONE:
            value = getattr(self, field)
            if value < 1:
                raise ValueError(f"{_VARIABLES[field]} must be at least 1, not {value}")
        if not self.name:
            raise ValueError(f"{_VARIABLES['name']} must not be empty")

    @property
    def queue(self) -> str:
        return f"gpu.{self.name}"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> WorkerSettings:
        """The settings the ``LOOPWRIGHT_WORKER_*`` variables give (an unset or empty one: the
        field's default)."""
        env = os.environ if environ is None else environ
        given = {f: env.get(var, "").strip() for f, var in _VARIABLES.items()}
        given = {f: v for f, v in given.items() if v}
        values: dict[str, object] = {"name": given.pop("name", "") or socket.gethostname()}
        for field, text in given.items():
            values[field] = _parse(field, text)
        settings = cls(**values)  # type: ignore[arg-type]
        if not settings.address:  # the other ranks reach it by its host name
            settings = dataclasses.replace(settings, address=socket.gethostname())
        return settings

    def to_env(self) -> dict[str, str]:
        """The variables that give these settings back through ``from_env`` (snapshot cadence
        is the control plane's: ``LOOPWRIGHT_SNAPSHOT_EVERY_*``, not written here)."""
        out = {}
        for field, var in _VARIABLES.items():
            value = getattr(self, field)
            if value is None:
                out[var] = ""
            elif isinstance(value, tuple):
                out[var] = ",".join(value)
            else:
                out[var] = str(value)
        return out


# field -> its environment variable
_VARIABLES = {
    "name": f"{PREFIX}NAME",
    "base_model": f"{PREFIX}BASE_MODEL",
    "device": f"{PREFIX}DEVICE",
    "dtype": f"{PREFIX}DTYPE",
    "capacity": f"{PREFIX}CAPACITY",
    "max_loaded_adapters": f"{PREFIX}MAX_LOADED",
    "sampler_adapters": f"{PREFIX}SAMPLER_ADAPTERS",
    "release_slack_mb": f"{PREFIX}RELEASE_SLACK_MB",
    "scratch_dir": f"{PREFIX}SCRATCH_DIR",
    "subnet_ids": f"{PREFIX}SUBNETS",
    "security_group_ids": f"{PREFIX}SECURITY_GROUPS",
    "pass_tokens": f"{PREFIX}PASS_TOKENS",
    "pass_samples": f"{PREFIX}PASS_SAMPLES",
    "address": f"{PREFIX}ADDRESS",
    "memory_bytes": f"{PREFIX}MEMORY",
}
_AT_LEAST_ONE = (
    "capacity",
    "max_loaded_adapters",
    "sampler_adapters",
    "pass_tokens",
    "pass_samples",
)
_WHOLE_NUMBERS = (*_AT_LEAST_ONE, "release_slack_mb")


def listed(text: str) -> tuple[str, ...]:
    """A comma-separated value as a tuple, blanks dropped."""
    return tuple(item.strip() for item in text.split(",") if item.strip())


def _parse(field: str, text: str) -> object:
    if field in ("subnet_ids", "security_group_ids"):
        return listed(text)
    if field == "scratch_dir":
        return Path(text)
    if field == "memory_bytes":
        return parse_memory(text)
    if field in _WHOLE_NUMBERS:
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{_VARIABLES[field]}: {text!r} is not a whole number") from None
    return text
