"""Which network interface a rank's collectives use: the one that holds the worker's announced
address (``--address``). gloo (and NCCL's bootstrap) otherwise pick an interface from the host
name, which on a host with several networks (containers, network namespaces, a separate
cluster network) may be one the other ranks cannot reach. An interface named by the operator
(``GLOO_SOCKET_IFNAME``, ``NCCL_SOCKET_IFNAME``) is kept."""

from __future__ import annotations

import os
import socket

import psutil


def interface_of(address: str) -> str | None:
    """The name of this host's interface whose IPv4 address ``address`` is (or resolves to);
    None if none does."""
    try:
        ip = socket.gethostbyname(address)
    except OSError:
        return None
    for name, addresses in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == ip for a in addresses):
            return name
    return None


def use_interface_of(address: str, device: str) -> str | None:
    """Have this process's next process group talk over the interface of ``address`` (gloo on
    CPU, NCCL's sockets on CUDA), unless the operator chose one. Returns the interface set."""
    variable = "NCCL_SOCKET_IFNAME" if device.startswith("cuda") else "GLOO_SOCKET_IFNAME"
    if os.environ.get(variable):
        return None
    name = interface_of(address)
    if name is not None:
        os.environ[variable] = name
    return name
