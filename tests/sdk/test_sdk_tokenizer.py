"""get_tokenizer: files fetched once from the server, cached on disk, loaded with transformers."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from fake_server import BASE_MODEL, FakeServer

from loopwright import ServiceClient
from loopwright._tokenizer import _write, cache_dir, safe_name

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")


def test_downloaded_once_then_cached(server: FakeServer, service: ServiceClient) -> None:
    client = service.create_lora_training_client(BASE_MODEL)
    tokenizer = client.get_tokenizer()
    assert tokenizer.encode("hello world", add_special_tokens=False) == [1, 2]
    assert tokenizer.decode([3, 4]) == "the answer"
    assert client.get_tokenizer() is tokenizer

    folder = Path(os.environ["LOOPWRIGHT_CACHE_DIR"]) / "tokenizers" / "loopwright--tiny-byte-llama"
    assert folder == cache_dir() / safe_name(BASE_MODEL)
    assert (folder / "tokenizer.json").exists()
    other = service.create_lora_training_client(BASE_MODEL)
    assert other.get_tokenizer().encode("hello", add_special_tokens=False) == [1]
    sampler = service.create_sampling_client(base_model=BASE_MODEL)
    sampler.get_tokenizer()
    assert len(server.calls("base_models/tokenizer")) == 1


def test_missing_transformers_gives_a_hint(
    service: ServiceClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = service.create_lora_training_client(BASE_MODEL)
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ImportError, match=r"loopwright\[tokenizer\]"):
        client.get_tokenizer()


def test_safe_names_and_unsafe_files(tmp_path: Path) -> None:
    assert safe_name("Qwen/Qwen3-8B") == "Qwen--Qwen3-8B"
    assert safe_name("../../etc") == "etc"
    assert "/" not in safe_name("a/b c:d")
    with pytest.raises(ValueError, match="unsafe"):
        _write(tmp_path / "x", {"../evil": "boom"})
    assert not (tmp_path / "evil").exists()
    assert list(tmp_path.iterdir()) == []
