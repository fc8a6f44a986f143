"""The local store writes under temporary names and renames: a failed put changes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from controlplane.storage import LocalStorage, storage_for
from controlplane.storage import local as local_module


def test_a_failed_put_leaves_the_previous_folder_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalStorage(tmp_path / "root")
    src = tmp_path / "src"
    src.mkdir()
    (src / "a").write_bytes(b"old a")
    (src / "b").write_bytes(b"old b")
    store.put(src, "t/s1")
    (src / "a").write_bytes(b"new a")
    (src / "b").write_bytes(b"new b")
    copy, calls = local_module._copy, []

    def failing(source: Path, dest: Path):
        calls.append(source.name)
        if len(calls) == 2:
            raise OSError("disk full")
        return copy(source, dest)

    monkeypatch.setattr(local_module, "_copy", failing)
    with pytest.raises(OSError, match="disk full"):
        store.put(src, "t/s1")
    folder = tmp_path / "root" / "t" / "s1"
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == {"a": b"old a", "b": b"old b"}
    assert [p.name for p in (tmp_path / "root" / "t").iterdir()] == ["s1"]  # no temporaries


def test_a_put_leaves_no_temporaries(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_bytes(b"x")
    store = LocalStorage(tmp_path / "root")
    store.put(src, "t/s1")
    store.put(src, "t/s1")
    assert [p.name for p in (tmp_path / "root" / "t").iterdir()] == ["s1"]


def test_file_uris_round_trip_through_storage_for(tmp_path: Path) -> None:
    root = tmp_path / "with space"
    store = LocalStorage(root)
    uri = store.uri("t/s1")
    assert uri.startswith("file:///") and "%20" in uri
    rooted = storage_for(uri)
    assert isinstance(rooted, LocalStorage) and rooted.root == root / "t" / "s1"
