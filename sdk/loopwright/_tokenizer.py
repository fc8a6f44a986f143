"""Tokenizers: fetch a base model's tokenizer files once, cache them on disk, load them locally.

Files live under ``$LOOPWRIGHT_CACHE_DIR/tokenizers/<safe name>/`` (default ``~/.cache/loopwright``);
transformers is needed only here (``pip install 'loopwright[tokenizer]'``).
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._http import HTTPClient
from .types import TokenizerFilesResponse

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["cache_dir", "load_tokenizer", "safe_name"]

_COMPLETE = ".complete"


def cache_dir() -> Path:
    """Where tokenizer folders are kept."""
    root = os.environ.get("LOOPWRIGHT_CACHE_DIR") or "~/.cache/loopwright"
    return Path(root).expanduser() / "tokenizers"


def safe_name(base_model: str) -> str:
    """A folder name for a base model: "org/model" becomes "org--model"."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", base_model.replace("/", "--")).strip(".-")
    return name or "model"


def _auto_tokenizer() -> Any:
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:
        raise ImportError(
            "get_tokenizer() needs transformers: pip install 'loopwright[tokenizer]'"
        ) from exc
    return AutoTokenizer


def _write(folder: Path, files: dict[str, str]) -> None:
    """Write the files into a temporary sibling folder, then move it into place at once."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = folder.parent / f".{folder.name}.{uuid.uuid4().hex}"
    staging.mkdir()
    try:
        for name, text in files.items():
            if Path(name).name != name or name in ("", ".", ".."):
                raise ValueError(f"unsafe tokenizer file name from the server: {name!r}")
            (staging / name).write_text(text, encoding="utf-8")
        (staging / _COMPLETE).write_text("")
        if folder.exists() and not (folder / _COMPLETE).exists():
            shutil.rmtree(folder)  # left behind half-written by an older version or a crash
        try:
            os.replace(staging, folder)
        except OSError:
            if not (folder / _COMPLETE).exists():  # another process won the race
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def load_tokenizer(http: HTTPClient, base_model: str) -> PreTrainedTokenizerBase:
    """The base model's tokenizer, downloaded from the server on first use."""
    auto = _auto_tokenizer()
    folder = cache_dir() / safe_name(base_model)
    if not (folder / _COMPLETE).exists():
        response = http.request("GET", "base_models/tokenizer", params={"name": base_model})
        files = TokenizerFilesResponse.model_validate(response.json()).files
        _write(folder, files)
    tokenizer: PreTrainedTokenizerBase = auto.from_pretrained(str(folder))
    return tokenizer
