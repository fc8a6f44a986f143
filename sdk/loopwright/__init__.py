"""Loopwright SDK: a client for the Tinker training API, served by Loopwright or compatible hosts.

``loopwright.types`` holds the wire types; they are re-exported here.
"""

from loopwright import types
from loopwright.types import *  # noqa: F403

__version__ = "0.1.0"

__all__ = ["__version__", "types"]
__all__ += types.__all__
