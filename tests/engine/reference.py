"""An independent reference: a plain transformers + peft model, one unpadded datum at a time.

It shares nothing with the engine's batching, loss or sampling code; tests compare the engine
against it.
"""

from __future__ import annotations

import numpy as np
import peft
import torch
from transformers import AutoModelForCausalLM

from workers.engine.host import ModelHost


def random_tokens(rng: np.random.Generator, n: int, vocab: int = 256) -> list[int]:
    return rng.integers(0, vocab, size=n).tolist()


def randomize_adapter(host: ModelHost, model_id: str, seed: int, scale: float = 0.05) -> None:
    """Give lora_B non-zero values so every LoRA parameter receives a gradient."""
    g = torch.Generator().manual_seed(seed)
    params = host.pool.parameters(model_id)
    tensors = {k: torch.randn(p.shape, generator=g) * scale for k, p in params.items()}
    host.pool.load_state_dict(model_id, tensors)


def plain_peft_model(
    host: ModelHost, model_id: str, dtype: torch.dtype = torch.float32
) -> tuple[torch.nn.Module, dict[str, torch.nn.Parameter]]:
    """A fresh base model from disk with the host adapter's weights, through peft's own loader."""
    base = AutoModelForCausalLM.from_pretrained(host.materialized.path, dtype=dtype)
    cfg = host.pool.peft_config(model_id)
    model = peft.get_peft_model(
        base, peft.LoraConfig(r=cfg.r, lora_alpha=cfg.lora_alpha, target_modules=cfg.target_modules)
    )
    state = {k: v.detach().to(dtype) for k, v in host.pool.state_dict(model_id).items()}
    peft.set_peft_model_state_dict(model, state)
    params = {n.replace(".default.", "."): p for n, p in model.named_parameters() if "lora_" in n}
    return model, params


def token_logprobs(model: torch.nn.Module, tokens: list[int], targets: list[int]) -> torch.Tensor:
    logits = model(input_ids=torch.tensor([tokens])).logits[0]
    return torch.log_softmax(logits.double(), dim=-1)[
        torch.arange(len(targets)), torch.tensor(targets)
    ]


def assert_grads_close(
    ours: dict[str, torch.nn.Parameter], ref: dict[str, torch.nn.Parameter]
) -> None:
    """Gradients agree to 1e-5 relative to each tensor's largest entry (fp32 summation order differs)."""
    assert set(ours) == set(ref)
    for name, p in ref.items():
        assert ours[name].grad is not None, name
        expected = p.grad.double()
        scale = max(1.0, float(expected.abs().max()))
        diff = float((ours[name].grad.double() - expected).abs().max())
        assert diff <= 1e-5 * scale, f"{name}: max |Δgrad| {diff:.3g} > 1e-5 × {scale:.3g}"
