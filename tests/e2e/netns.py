"""Hosts for end-to-end tests: Linux network namespaces joined by veth pairs to a bridge of
their own, made and removed by the test (root and iproute2 needed; nothing else is touched).

Each host has one interface, ``eth0``, with an address in 10.231.<net>.0/24 and no route
anywhere else: traffic between hosts crosses the bridge, and nothing leaves the namespaces.
``cut(host)`` takes the host's cable out of the bridge (its packets go nowhere, silently, as
with a switch port gone dead) and ``restore(host)`` puts it back.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass, field


def available() -> str | None:
    """Why namespaced hosts cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2's ip is not installed"
    probe = f"lwp{secrets.token_hex(3)}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.decode().strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str, ns: str | None = None) -> None:
    cmd = ["ip", *args] if ns is None else ["ip", "netns", "exec", ns, "ip", *args]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {done.stderr.strip()}")


@dataclass
class Network:
    """A switch (a namespace holding a bridge) and the hosts plugged into it."""

    tag: str = field(default_factory=lambda: secrets.token_hex(3))
    net: int = field(default_factory=lambda: 100 + secrets.randbelow(150))
    hosts: dict[str, str] = field(default_factory=dict)  # name -> address
    _ports: dict[str, str] = field(default_factory=dict)  # name -> bridge-side interface

    @property
    def switch(self) -> str:
        return f"lw{self.tag}-sw"

    def ns(self, host: str) -> str:
        return f"lw{self.tag}-{host}"

    def start(self) -> Network:
        _ip("netns", "add", self.switch)
        _ip("link", "add", "br0", "type", "bridge", ns=self.switch)
        _ip("link", "set", "br0", "up", ns=self.switch)
        return self

    def add(self, host: str) -> str:
        """A new host on the switch; its address."""
        ns, n = self.ns(host), len(self.hosts) + 2
        address = f"10.231.{self.net}.{n}"
        port, cable = f"p{self.tag}{n}", f"c{self.tag}{n}"
        _ip("netns", "add", ns)
        _ip("link", "add", port, "type", "veth", "peer", "name", cable)
        _ip("link", "set", port, "netns", self.switch)
        _ip("link", "set", cable, "netns", ns)
        _ip("link", "set", port, "master", "br0", ns=self.switch)
        _ip("link", "set", port, "up", ns=self.switch)
        _ip("link", "set", cable, "name", "eth0", ns=ns)
        _ip("addr", "add", f"{address}/24", "dev", "eth0", ns=ns)
        _ip("link", "set", "eth0", "up", ns=ns)
        _ip("link", "set", "lo", "up", ns=ns)  # its own loopback (PostgreSQL's socket checks)
        self.hosts[host], self._ports[host] = address, port
        return address

    def cut(self, host: str) -> None:
        _ip("link", "set", self._ports[host], "nomaster", ns=self.switch)

    def restore(self, host: str) -> None:
        _ip("link", "set", self._ports[host], "master", "br0", ns=self.switch)

    def on(self, host: str, cmd: list[str]) -> list[str]:
        """``cmd`` run on ``host``."""
        return ["ip", "netns", "exec", self.ns(host), *cmd]

    def stop(self) -> None:
        for host in list(self.hosts):
            subprocess.run(["ip", "netns", "del", self.ns(host)], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.switch], capture_output=True)
        self.hosts.clear()
