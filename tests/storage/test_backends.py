"""Both checkpoint stores keep the same promises: a manifest of sizes and sha256s at upload, every
fetch checked against it, a put that replaces, and deletes that stay inside their prefix."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from controlplane.storage import (
    IntegrityError,
    LocalStorage,
    MissingObjectError,
    Storage,
    StorageError,
    manifest_digest,
)
from controlplane.storage.s3 import S3Storage

FILES = {
    "adapter_model.safetensors": b"\x00weights" * 1000,
    "adapter_config.json": b'{"r": 4}',
    "empty": b"",
    "merged/part-1.bin": bytes(range(256)) * 10,
}


class Store:
    """A store under test, and a way to reach behind it to what it holds."""

    def __init__(
        self,
        storage: Storage,
        spoil: Callable[[str, bytes], None],
        remove: Callable[[str], None],
        scheme: str,
    ) -> None:
        self.storage, self.spoil, self.remove, self.scheme = storage, spoil, remove, scheme


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path: Path) -> Store:
    if request.param == "local":
        root = tmp_path / "root"
        return Store(
            LocalStorage(root),
            lambda key, data: (root / key).write_bytes(data),
            lambda key: (root / key).unlink(),
            "file",
        )
    s3: Any = request.getfixturevalue("s3")
    bucket: str = request.getfixturevalue("bucket")
    return Store(
        S3Storage(s3, bucket, "base/prefix"),
        lambda key, data: s3.put_object(Bucket=bucket, Key=f"base/prefix/{key}", Body=data),
        lambda key: s3.delete_object(Bucket=bucket, Key=f"base/prefix/{key}"),
        "s3",
    )


def write(folder: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return folder


def read(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


def test_round_trip_with_manifest(store: Store, tmp_path: Path) -> None:
    manifest = store.storage.put(write(tmp_path / "src", FILES), "t1/m1/weights/s1")
    assert manifest == {
        name: {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        for name, data in FILES.items()
    }
    assert store.storage.list("t1/m1/weights/s1") == {n: len(d) for n, d in FILES.items()}
    store.storage.fetch("t1/m1/weights/s1", tmp_path / "out", manifest)
    assert read(tmp_path / "out") == FILES
    uri = store.storage.uri("t1/m1/weights/s1")
    assert uri.startswith(f"{store.scheme}://") and uri.endswith("/t1/m1/weights/s1")
    assert len(manifest_digest(manifest)) == 64
    assert manifest_digest(manifest) == manifest_digest(dict(reversed(manifest.items())))


def test_fetching_only_what_the_manifest_names(store: Store, tmp_path: Path) -> None:
    manifest = store.storage.put(write(tmp_path / "src", FILES), "p")
    wanted = {"adapter_config.json": manifest["adapter_config.json"]}
    store.storage.fetch("p", tmp_path / "out", wanted)
    assert read(tmp_path / "out") == {"adapter_config.json": FILES["adapter_config.json"]}


def test_put_replaces_what_was_under_the_prefix(store: Store, tmp_path: Path) -> None:
    store.storage.put(write(tmp_path / "a", FILES), "p")
    second = write(tmp_path / "b", {"adapter_config.json": b"{}", "new.bin": b"n"})
    manifest = store.storage.put(second, "p")
    assert set(manifest) == {"adapter_config.json", "new.bin"}
    assert store.storage.list("p") == {"adapter_config.json": 2, "new.bin": 1}


@pytest.mark.parametrize("same_size", [True, False])
def test_an_altered_object_is_detected_by_name(
    store: Store, tmp_path: Path, same_size: bool
) -> None:
    manifest = store.storage.put(write(tmp_path / "src", FILES), "p")
    original = FILES["adapter_model.safetensors"]
    spoiled = b"X" + original[1:] if same_size else original + b"!"
    store.spoil("p/adapter_model.safetensors", spoiled)
    with pytest.raises(IntegrityError) as caught:
        store.storage.fetch("p", tmp_path / "out", manifest)
    assert caught.value.category == "user"
    assert caught.value.uri == store.storage.uri("p/adapter_model.safetensors")
    assert str(caught.value).startswith(store.storage.uri("p/adapter_model.safetensors"))
    assert ("sha256" in str(caught.value)) == same_size
    out = tmp_path / "out"
    assert "adapter_model.safetensors" not in read(out) and not list(out.glob(".*part"))


def test_a_missing_object_is_detected_by_name(store: Store, tmp_path: Path) -> None:
    manifest = store.storage.put(write(tmp_path / "src", FILES), "p")
    store.remove("p/merged/part-1.bin")
    with pytest.raises(MissingObjectError) as caught:
        store.storage.fetch("p", tmp_path / "out", manifest)
    assert caught.value.uri == store.storage.uri("p/merged/part-1.bin")
    assert "missing" in str(caught.value) and caught.value.category == "user"


def test_delete_stays_inside_its_prefix(store: Store, tmp_path: Path) -> None:
    src = write(tmp_path / "src", FILES)
    for prefix in ("t/s1", "t/s1.merged", "t/s10"):
        store.storage.put(src, prefix)
    assert store.storage.delete("t/s1") == len(FILES)
    assert store.storage.list("t/s1") == {}
    assert len(store.storage.list("t/s1.merged")) == len(store.storage.list("t/s10")) == len(FILES)
    assert store.storage.delete("t/nothing") == 0


def test_a_store_rooted_at_one_prefix(store: Store, tmp_path: Path) -> None:
    """What storage_for(uri) gives for a checkpoint: the prefix "" is the checkpoint itself."""
    manifest = store.storage.put(write(tmp_path / "src", FILES), "t/s1")
    if isinstance(store.storage, LocalStorage):
        rooted: Storage = LocalStorage(store.storage.root / "t" / "s1")
    else:
        assert isinstance(store.storage, S3Storage)
        rooted = S3Storage(store.storage.client, store.storage.bucket, "base/prefix/t/s1")
    assert rooted.uri() == store.storage.uri("t/s1")
    rooted.fetch("", tmp_path / "out", manifest)
    assert read(tmp_path / "out") == FILES
    assert rooted.delete() == len(FILES) and store.storage.list("t/s1") == {}


@pytest.mark.parametrize("name", ["../escape", "/abs", "a//b", "a/./b", ""])
def test_manifest_names_cannot_leave_the_folder(store: Store, tmp_path: Path, name: str) -> None:
    with pytest.raises(StorageError, match="bad object name"):
        store.storage.fetch("p", tmp_path / "out", {name: {"size": 0, "sha256": ""}})
    assert not (tmp_path / "escape").exists()
