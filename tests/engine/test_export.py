"""Exports: the adapter loads in plain peft, the merged model in plain transformers, same logprobs."""

from __future__ import annotations

import numpy as np
import peft
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from loopwright.types import Datum, ForwardBackwardInput, ModelInput
from workers.engine.adapters import AdapterConfig

from .reference import randomize_adapter, token_logprobs

TOKENS = [5, 80, 12, 200, 33, 33, 7, 1]


def session_logprobs(host) -> np.ndarray:
    d = Datum(
        model_input=ModelInput.from_ints(TOKENS[:-1]), loss_fn_inputs={"target_tokens": TOKENS[1:]}
    )
    out = host.forward("m", ForwardBackwardInput(data=[d], loss_fn="cross_entropy"))
    return out.loss_fn_outputs[0]["logprobs"].to_numpy()


def test_adapter_export_loads_in_plain_peft(host, tmp_path) -> None:
    host.create_adapter("m", AdapterConfig(rank=4, alpha=16, seed=1, train_unembed=True))
    randomize_adapter(host, "m", seed=2, scale=0.1)
    host.save_state("m", tmp_path / "adapter", optimizer=False)
    base = AutoModelForCausalLM.from_pretrained(host.materialized.path)
    model = peft.PeftModel.from_pretrained(base, tmp_path / "adapter")
    with torch.no_grad():
        ref = token_logprobs(model, TOKENS[:-1], TOKENS[1:]).numpy()
    np.testing.assert_allclose(session_logprobs(host), ref, rtol=1e-5, atol=1e-5)


def test_merged_export_loads_in_plain_transformers(host, tmp_path) -> None:
    host.create_adapter("m", AdapterConfig(rank=4, seed=1, train_unembed=False))
    randomize_adapter(host, "m", seed=3, scale=0.1)
    out = host.export_merged("m", tmp_path / "merged")
    model = AutoModelForCausalLM.from_pretrained(out)
    assert not any("lora" in n for n, _ in model.named_parameters())
    AutoTokenizer.from_pretrained(out)
    with torch.no_grad():
        ref = token_logprobs(model, TOKENS[:-1], TOKENS[1:]).numpy()
    np.testing.assert_allclose(session_logprobs(host), ref, rtol=1e-5, atol=1e-5)


def test_merging_an_adapted_tied_unembedding_leaves_input_embeddings_alone(
    tiny_catalog, tmp_path
) -> None:
    """SmolLM2 ties its embeddings: the merged lm_head must not leak into embed_tokens."""
    from workers.engine.catalog import ModelCatalog
    from workers.engine.host import HostConfig, ModelHost

    src = AutoModelForCausalLM.from_pretrained(
        tiny_catalog.materialize("loopwright/tiny-byte-llama").path
    )
    src.config.tie_word_embeddings = True
    src.lm_head.weight = src.model.embed_tokens.weight
    src.save_pretrained(tmp_path / "tied")
    AutoTokenizer.from_pretrained(
        tiny_catalog.materialize("loopwright/tiny-byte-llama").path
    ).save_pretrained(tmp_path / "tied")
    catalog = ModelCatalog(cache_dir=tiny_catalog.cache_dir, folders={"tied": tmp_path / "tied"})
    host = ModelHost("tied", HostConfig(spill_dir=tmp_path / "spill"), catalog)
    host.create_adapter("m", AdapterConfig(rank=4, seed=1, train_unembed=True))
    randomize_adapter(host, "m", seed=3, scale=0.1)
    model = AutoModelForCausalLM.from_pretrained(host.export_merged("m", tmp_path / "merged"))
    torch.testing.assert_close(
        model.model.embed_tokens.weight, src.model.embed_tokens.weight, rtol=0, atol=0
    )
    assert not torch.equal(model.lm_head.weight, src.lm_head.weight)
    with torch.no_grad():
        ref = token_logprobs(model, TOKENS[:-1], TOKENS[1:]).numpy()
    np.testing.assert_allclose(session_logprobs(host), ref, rtol=1e-5, atol=1e-5)
