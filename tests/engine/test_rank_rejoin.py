"""A worker process takes part in many replica groups over its life, one at a time: after one
ends it joins the next with processes that never were in a group, and a join nobody answers
gives up after its join timeout, leaving the process free for the next. Real processes
(spawn, gloo)."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import torch.distributed as dist
import torch.multiprocessing as mp

from workers.engine.distributed import RankGroup

LONG = timedelta(seconds=120)


def _program(index: int, folder: Path) -> None:
    def group(name: str, rank: int) -> RankGroup:
        store = dist.FileStore(str(folder / name), 2)
        return RankGroup.join(store, rank=rank, world_size=2, timeout=LONG, join_timeout=LONG)

    if index == 0:  # three groups in one life
        first = group("first", 0)
        assert first.all_gather(index) == [0, 1]
        first.close()
        lonely = dist.TCPStore(
            "127.0.0.1", 0, world_size=2, is_master=True, wait_for_workers=False, timeout=LONG
        )
        started = time.monotonic()
        try:
            RankGroup.join(
                lonely, rank=0, world_size=2, timeout=LONG, join_timeout=timedelta(seconds=2)
            )
        except dist.DistError:
            pass
        else:
            raise AssertionError("a group nobody joined formed")
        assert time.monotonic() - started < 30 and not dist.is_initialized()
        second = group("second", 0)
        assert second.all_gather(index) == [0, 2]
        second.close()
    else:  # process 1 joins the first group, process 2 (never in one) the second
        g = group("first" if index == 1 else "second", 1)
        g.all_gather(index)
        g.close()


def test_a_process_joins_group_after_group(tmp_path: Path) -> None:
    mp.start_processes(_program, args=(tmp_path,), nprocs=3, join=True, start_method="spawn")
