"""download_model_package: the archive is streamed (again from the start after a retry) and
extracted into the destination; members that could land anywhere else are refused."""

from __future__ import annotations

import asyncio
import io
import tarfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fake_server import API_KEY, FAST_RETRY

from loopwright import LoopwrightError, NotFoundError, ServiceClient

ARN = "arn:loopwright:registry::123456789012:model-package/run-x/3"
FILES = {"adapter_config.json": b'{"r": 4}', "adapter_model.safetensors": b"w" * 3000}


def archive(members: list[tuple[tarfile.TarInfo, bytes]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for info, data in members:
            info.size = len(data) if info.isfile() else 0
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return out.getvalue()


def member(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, linkname
    return info


def good_archive(root: str = "run-x-v3-adapter") -> bytes:
    folder = member(root, tarfile.DIRTYPE)
    return archive([(folder, b""), *((member(f"{root}/{n}"), d) for n, d in FILES.items())])


def client(answers: list[httpx.Response], seen: list[httpx.Request]) -> ServiceClient:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answers.pop(0)

    return ServiceClient(api_key=API_KEY, transport=httpx.MockTransport(handler), retry=FAST_RETRY)


def test_a_version_is_streamed_and_extracted_into_its_folder(tmp_path: Path) -> None:
    seen: list[httpx.Request] = []
    with client([httpx.Response(200, content=good_archive())], seen) as service:
        folder = service.download_model_package(ARN, tmp_path, include_optimizer=True)
    assert folder == tmp_path / "run-x-v3-adapter"
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == FILES
    assert [p.name for p in tmp_path.iterdir()] == [folder.name]  # no temporary file left
    (request,) = seen
    assert request.url.path == "/api/v1/registry/model-packages/download"
    assert dict(request.url.params) == {
        "path": ARN,
        "format": "adapter",
        "include_optimizer": "true",
    }


class BrokenStream(httpx.SyncByteStream):
    """Half an answer, then the connection drops."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __iter__(self) -> Iterator[bytes]:
        yield self.data[: len(self.data) // 2]
        raise httpx.ReadError("connection reset")


def test_a_dropped_or_failed_download_is_retried_from_the_start(tmp_path: Path) -> None:
    data = good_archive()
    answers = [
        httpx.Response(503, json={"detail": "storage is down", "code": "unavailable"}),
        httpx.Response(200, stream=BrokenStream(data)),
        httpx.Response(200, content=data),
    ]
    seen: list[httpx.Request] = []
    with client(answers, seen) as service:
        folder = service.download_model_package("tinker://m/weights/a", tmp_path, format="merged")
    assert len(seen) == 3 and seen[0].url.params["format"] == "merged"
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == FILES


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        (member("../evil"), "leave"),
        (member("/etc/evil"), "leave"),
        (member("run-x/../../evil"), "leave"),
        (member("run-x/link", tarfile.SYMTYPE, "/etc/passwd"), "plain files"),
        (member("run-x/hard", tarfile.LNKTYPE, "run-x/a"), "plain files"),
        (member("run-x/fifo", tarfile.FIFOTYPE), "plain files"),
    ],
)
def test_members_that_could_land_elsewhere_are_refused(
    tmp_path: Path, bad: tarfile.TarInfo, why: str
) -> None:
    data = archive([(member("run-x/a"), b"a"), (bad, b"x")])
    dest = tmp_path / "dest"
    with (
        client([httpx.Response(200, content=data)], []) as service,
        pytest.raises(LoopwrightError, match=why),
    ):
        service.download_model_package(ARN, dest)
    assert list(dest.iterdir()) == []  # nothing extracted, no temporary file
    assert not (tmp_path / "evil").exists()


def test_errors_are_raised_and_leave_nothing(tmp_path: Path) -> None:
    answers = [
        httpx.Response(404, json={"detail": "no model package", "field": "path"}),
        httpx.Response(200, content=good_archive()[:100]),
    ]
    with client(answers, []) as service:
        with pytest.raises(NotFoundError, match="no model package"):
            service.download_model_package(ARN, tmp_path)
        with pytest.raises(LoopwrightError, match="unreadable"):
            service.download_model_package(ARN, tmp_path)
        with pytest.raises(ValueError, match="tinker://"):
            service.download_model_package("run-x/3", tmp_path)
        with pytest.raises(ValueError, match="adapter, merged"):
            service.download_model_package(ARN, tmp_path, format="gguf")
    assert list(tmp_path.iterdir()) == []


def test_the_async_twin(tmp_path: Path) -> None:
    with client([httpx.Response(200, content=good_archive())], []) as service:
        folder = asyncio.run(service.download_model_package_async(ARN, tmp_path))
    assert folder == tmp_path / "run-x-v3-adapter"
