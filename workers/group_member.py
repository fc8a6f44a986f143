"""This worker's part in a replica group (data-parallel training models).

The heartbeat calls ``check()``: it reads the worker's membership (``replica_groups``) and
joins a group placement named it to, leaves one that ended, and keeps a ready group's followers
from timing out (``ping``). Joining runs on its own thread, so the heartbeat goes on:

- **rank 0** (the coordinator) opens a TCP store on its address at a free port, announces
  ``tcp://address:port``, waits for every rank in ``init_process_group``, marks the group ready
  and attaches it to the engine (``ReplicatedHost``): its drain then runs the group's models'
  operations through ``DataParallel``;
- **a follower** waits for the announcement, joins, and runs ``DataParallel.serve()`` until the
  group ends; it claims nothing itself.

A collective that fails (a rank gone, a timeout) ends the group in the database
(``failover.group_broken``: its models move and are restored from their recovery points on a new
group); every member then drops the group's adapters, closes the process group and is free to
join another. One group per process (torch.distributed's default group).

A worker whose memory does not hold its base whole (``shard_ranks`` > 1) shards the base over
each group it joins, before anything else runs on it, and loads it whole again before joining
the next (``WorkerRuntime.reload_base``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import Protocol
from urllib.parse import urlsplit

import torch.distributed as dist
from django.conf import settings as django_settings
from django.db import close_old_connections

from controlplane import worker_port as port
from controlplane.worker_port import Membership

from .engine.distributed import DataParallel, RankGroup, is_sharded, shard_base
from .engine.host import ModelHost
from .rank_network import use_interface_of
from .replicated_host import ReplicatedHost

log = logging.getLogger("loopwright.worker.group")


def group_timeout() -> timedelta:
    """Bounds every collective, a follower's wait for the next operation included."""
    return timedelta(seconds=float(os.environ.get("LOOPWRIGHT_GROUP_TIMEOUT_SECONDS", "300")))


def join_timeout(sharding: bool = False) -> timedelta:
    """Bounds joining (the rendezvous store's waits; a follower waits twice that for the
    rendezvous): a lease, or for a worker that shards its base a third of
    ``SHARDED_GROUP_FORM_SECONDS`` (the others may still be loading and sharding theirs). A
    member that has not joined by then is not coming; every rank gives up before the group is
    declared stuck (see ``failover.groups_stuck_forming``), so each is free for the next
    group."""
    lease = max(2.0, django_settings.WORKER_LEASE_SECONDS)
    if sharding:
        return timedelta(seconds=max(lease, django_settings.SHARDED_GROUP_FORM_SECONDS / 3))
    return timedelta(seconds=lease)


class Reachable(Protocol):
    """Where the other ranks reach a worker, and the device its ranks run on."""

    @property
    def address(self) -> str: ...

    @property
    def device(self) -> str: ...


class GroupWorker(Protocol):
    """What a group member needs of its worker (``WorkerRuntime``)."""

    @property
    def name(self) -> str: ...

    @property
    def settings(self) -> Reachable: ...

    @property
    def fence(self) -> port.Fence: ...  # the lease its membership is read under

    host: ModelHost
    engine: ReplicatedHost  # a led group is attached to it
    shard_ranks: int  # > 1: it shards its base over each group it joins

    def drain_lock(self, *, blocking: bool = True) -> AbstractContextManager[bool]: ...

    def drop_replicated(self) -> None: ...

    def reload_base(self) -> None: ...

    def poke(self) -> None: ...


class GroupMember:
    def __init__(self, rt: GroupWorker) -> None:
        self.rt = rt
        self._lock = threading.RLock()
        self._membership: Membership | None = None  # the group joined or being joined
        self._thread: threading.Thread | None = None
        self._group: RankGroup | None = None
        self._store: dist.TCPStore | None = None
        self._ending = threading.Event()  # the group ended: a follower's wait stops

    def _join_timeout(self) -> timedelta:
        return join_timeout(sharding=self.rt.shard_ranks > 1)

    @property
    def group_id(self) -> int | None:
        m = self._membership
        return m.group_id if m is not None else None

    def check(self) -> None:
        """From the heartbeat: leave a group that ended, join one placement named, ping a led
        one. Never blocks on the drain: what needs it waits for the next beat."""
        now = port.membership(fence=self.rt.fence)
        joined = self._membership
        if joined is not None and (now is None or now.group_id != joined.group_id):
            self._ending.set()
            if not self._end(joined):
                return
            joined = None
        if joined is None and now is not None:
            thread = self._thread
            if thread is not None and thread.is_alive():
                return  # still leaving the last one (a join that has not timed out yet)
            self._start(now)
        elif joined is not None and joined.rank == 0:
            self.rt.engine.ping()

    def _end(self, m: Membership) -> bool:
        """Leave ``m`` after it ended in the database; False: not now (its thread is still
        joining, or a follower's is in a collective, which fails once rank 0 closes its side: the
        thread leaves then; or the drain is busy)."""
        thread = self._thread
        if thread is not None and thread.is_alive():
            return False
        if m.rank != 0:
            self.teardown(m)
            return True
        with self.rt.drain_lock(blocking=False) as held:
            if not held:
                return False
            self.teardown(m)
            return True

    def _start(self, m: Membership) -> None:
        with self._lock:
            self._membership = m
            self._ending.clear()
            target = self._lead if m.rank == 0 else self._follow
            self._thread = threading.Thread(
                target=self._run, args=(target, m), name="replica-group", daemon=True
            )
            self._thread.start()

    def _run(self, target, m: Membership) -> None:
        try:
            self._reload()  # its last group sharded the base (and it was not reloaded yet)
            target(m)
            if m.rank == 0:
                return  # led: the group lives on in the engine until it fails or ends
        except Exception as exc:
            if not self._ending.is_set():
                log.warning("replica group %s: %s: %s", m.group_id, type(exc).__name__, exc)
                self._record_end(m, exc)
        finally:
            close_old_connections()
        self.teardown(m)  # a follower's serve() ended, or joining failed

    # -- rank 0 ----------------------------------------------------------------------------
    def _lead(self, m: Membership) -> None:
        rt = self.rt
        address = rt.settings.address or "127.0.0.1"
        timeout = group_timeout()
        self._store = dist.TCPStore(
            address,
            0,
            world_size=m.world_size,
            is_master=True,
            wait_for_workers=False,
            timeout=self._join_timeout(),
        )
        use_interface_of(address, rt.settings.device)
        rendezvous = f"tcp://{address}:{self._store.port}"
        if not port.group_announce(group_id=m.group_id, fence=rt.fence, rendezvous=rendezvous):
            raise RuntimeError("the group ended before it formed")
        log.info(
            "replica group %s: waiting for %d ranks at %s", m.group_id, m.world_size, rendezvous
        )
        self._group = RankGroup.join(
            self._store,
            rank=0,
            world_size=m.world_size,
            device=rt.settings.device,
            timeout=timeout,
            join_timeout=self._join_timeout(),
        )
        self._shard(m)
        dp = DataParallel(rt.host, self._group)
        if not port.group_ready(group_id=m.group_id, fence=rt.fence):
            raise RuntimeError("the group ended while it formed")
        rt.engine.attach(dp, lambda exc: self.broken(m, exc))
        log.info("replica group %s ready: %d ranks", m.group_id, m.world_size)
        rt.poke()  # its models' operations waited for this

    # -- followers -------------------------------------------------------------------------
    def _follow(self, m: Membership) -> None:
        rt = self.rt
        deadline = time.monotonic() + 2 * self._join_timeout().total_seconds()
        while not m.rendezvous:
            if self._ending.wait(0.2):
                return
            if time.monotonic() > deadline:
                raise RuntimeError("rank 0 did not announce the rendezvous in time")
            now = port.membership(fence=rt.fence)
            if now is None or now.group_id != m.group_id:
                return
            m = now
        use_interface_of(rt.settings.address or "127.0.0.1", rt.settings.device)
        url = urlsplit(m.rendezvous)
        if url.hostname is None or url.port is None:
            raise RuntimeError(f"rendezvous {m.rendezvous!r} names no host and port")
        timeout = group_timeout()
        self._store = dist.TCPStore(
            url.hostname, url.port, is_master=False, timeout=self._join_timeout()
        )
        self._group = RankGroup.join(
            self._store,
            rank=m.rank,
            world_size=m.world_size,
            device=rt.settings.device,
            timeout=timeout,
            join_timeout=self._join_timeout(),
        )
        log.info("replica group %s: joined as rank %d of %d", m.group_id, m.rank, m.world_size)
        self._shard(m)
        DataParallel(rt.host, self._group).serve()  # until rank 0 stops, or the group breaks

    def _shard(self, m: Membership) -> None:
        """On a worker that cannot hold its base whole, every rank shards it over the group
        (FSDP) before any adapter is made."""
        if self.rt.shard_ranks > 1:
            assert self._group is not None  # noqa: S101 — an invariant of this code, not a check of input
            shard_base(self.rt.host, self._group)
            log.info("replica group %s: base sharded over %d ranks", m.group_id, m.world_size)

    # -- the end ---------------------------------------------------------------------------
    def broken(self, m: Membership, exc: BaseException) -> None:
        """Rank 0's operation found the group failed (in the drain, which holds the drain
        lock): the group ends for everyone (its models move), and this worker leaves it."""
        self._ending.set()
        self._record_end(m, exc)
        self.teardown(m)

    def _record_end(self, m: Membership, exc: BaseException) -> None:
        try:
            port.group_broken(
                m.group_id,
                by=f"worker {self.rt.name}",
                reason=f"a collective failed on {self.rt.name}: {type(exc).__name__}: {exc}"[:500],
            )
        except Exception:
            log.exception("recording the end of replica group %s failed", m.group_id)
        finally:
            close_old_connections()

    def teardown(self, m: Membership | None = None) -> None:
        """Forget the group (``m``, or whichever is joined): the engine runs no more of its
        models, the process group closes, and the group's adapters are dropped from the host
        (their state lives on in their recovery points). The caller holds the drain lock, or
        is a follower's own thread."""
        with self._lock:
            if self._membership is None or (m is not None and self._membership != m):
                return
            ended, self._membership = self._membership, None
            self._ending.set()
        log.warning("left replica group %s", ended.group_id)
        self.rt.engine.detach()
        group, self._group, self._store = self._group, None, None
        if group is not None:
            try:
                group.close()
            except Exception:
                log.exception("closing the process group of replica group %s", ended.group_id)
        self.rt.drop_replicated()
        if self.rt.shard_ranks > 1:
            self._reload_soon()

    def _reload_soon(self) -> None:
        """A worker that shards its base loads it whole again as soon as it leaves a group, on
        a thread of its own (never the heartbeat's or the drain's): ready for the next group,
        which it joins only once this is done (``check`` waits for the thread)."""
        if threading.current_thread() is self._thread:
            self._reload()  # a follower's own thread, or a join that failed
            return
        self._thread = threading.Thread(target=self._reload, name="base-reload", daemon=True)
        self._thread.start()

    def _reload(self) -> None:
        if is_sharded(self.rt.host):
            with self.rt.drain_lock():
                self.rt.reload_base()
