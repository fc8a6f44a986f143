"""The built-in tiny byte-level Llama: a fixed config, seeded weights and an offline tokenizer.

Knows how to build and save one HF-format folder; caching and naming live in ``catalog``.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

# Bump when anything below changes: the cache folder is named after it, so old builds are ignored.
TINY_VERSION = 1
TINY_SEED = 0
TINY_CONTEXT_LENGTH = 1024

PAD, BOS, EOS = "<pad>", "<s>", "</s>"
# Each message is wrapped in <s>role\n ... </s>\n; the generation prompt opens an assistant turn.
TINY_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<s>' + message['role'] + '\\n' + message['content'] + '</s>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<s>assistant\\n' }}{% endif %}"
)


def byte_symbols() -> list[str]:
    """The ByteLevel symbol of each byte value (GPT-2's printable remapping), indexed by byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    symbols: dict[int, str] = {b: chr(b) for b in printable}
    others = [b for b in range(256) if b not in symbols]
    symbols.update({b: chr(256 + i) for i, b in enumerate(others)})
    return [symbols[b] for b in range(256)]


def build_tiny_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level BPE without merges: token id = byte value (0..255), then pad, bos, eos."""
    symbols = byte_symbols()
    assert set(symbols) == set(pre_tokenizers.ByteLevel.alphabet())  # noqa: S101 — an invariant of this code, not a check of input
    vocab = {symbol: byte for byte, symbol in enumerate(symbols)}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([PAD, BOS, EOS])  # ids 256, 257, 258 in this order
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        chat_template=TINY_CHAT_TEMPLATE,
        model_max_length=TINY_CONTEXT_LENGTH,
    )


def tiny_config(tokenizer: PreTrainedTokenizerFast) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=344,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=TINY_CONTEXT_LENGTH,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def build_tiny_model(tokenizer: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    """Weights come from our own seeded generator, not from transformers' init order."""
    config = tiny_config(tokenizer)
    model = LlamaForCausalLM(config).to(torch.float32)  # type: ignore[arg-type]  # transformers' .to stub
    generator = torch.Generator().manual_seed(TINY_SEED)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                param.copy_(
                    torch.randn(param.shape, generator=generator) * config.initializer_range
                )
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
    )
    return model.eval()


def save_tiny_model(dest: Path) -> None:
    """Write config, fp32 safetensors weights, generation config and tokenizer files to ``dest``."""
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer)
    model.save_pretrained(dest, safe_serialization=True)
    tokenizer.save_pretrained(dest)
