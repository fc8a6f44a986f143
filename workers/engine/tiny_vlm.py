"""The built-in tiny vision-language model: a LLaVA of a tiny CLIP vision tower and the tiny
byte-level Llama, with seeded weights, and its processor, all built offline.

A 32×32 image is cut into 16 patches of 8×8, each one image token: every image takes 16
``<image>`` tokens (id 259) in the sequence. Knows how to build and save one HF-format folder;
caching and naming live in ``catalog``.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import torch
from transformers import (
    CLIPImageProcessorPil,
    CLIPVisionConfig,
    GenerationConfig,
    LlamaConfig,
    LlavaConfig,
    LlavaForConditionalGeneration,
    LlavaProcessor,
    PreTrainedTokenizerFast,
)

from .tiny_model import build_tiny_tokenizer

# Bump when anything below changes: the cache folder is named after it, so old builds are ignored.
TINY_VLM_VERSION = 2
TINY_VLM_SEED = 1
TINY_VLM_CONTEXT_LENGTH = 1024
IMAGE_TOKEN = "<image>"  # noqa: S105 — the placeholder token's text, not a secret
IMAGE_SIZE = 32
PATCH_SIZE = 8
TOKENS_PER_IMAGE = (IMAGE_SIZE // PATCH_SIZE) ** 2

# Like the tiny Llama's template; a message's content may be a list of parts, images among them.
TINY_VLM_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<s>' + message['role'] + '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}{{ '<image>' }}{% else %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '</s>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<s>assistant\\n' }}{% endif %}"
)


def build_tiny_vlm_tokenizer() -> PreTrainedTokenizerFast:
    """The tiny byte-level tokenizer plus one ``<image>`` token (id 259)."""
    tokenizer = build_tiny_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": [IMAGE_TOKEN]})
    tokenizer.chat_template = TINY_VLM_CHAT_TEMPLATE
    return tokenizer


def build_tiny_processor(tokenizer: PreTrainedTokenizerFast) -> LlavaProcessor:
    """Resize the short side to 32, centre-crop 32×32, normalise like CLIP."""
    images = CLIPImageProcessorPil(
        size={"shortest_edge": IMAGE_SIZE}, crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}
    )
    return LlavaProcessor(
        image_processor=images,
        tokenizer=tokenizer,
        patch_size=PATCH_SIZE,
        vision_feature_select_strategy="default",  # the CLS feature is dropped
        image_token=IMAGE_TOKEN,
        num_additional_image_tokens=1,
        chat_template=TINY_VLM_CHAT_TEMPLATE,
    )


def tiny_vlm_config(tokenizer: PreTrainedTokenizerFast) -> LlavaConfig:
    vision = CLIPVisionConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=IMAGE_SIZE,
        patch_size=PATCH_SIZE,
        projection_dim=64,
    )
    text = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=344,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=TINY_VLM_CONTEXT_LENGTH,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=int(tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)),  # type: ignore[arg-type]  # one token gives one id
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
        tie_word_embeddings=False,
    )


def build_tiny_vlm(tokenizer: PreTrainedTokenizerFast) -> LlavaForConditionalGeneration:
    """Weights come from our own seeded generator, not from transformers' init order."""
    config = tiny_vlm_config(tokenizer)
    model = LlavaForConditionalGeneration(config).to(torch.float32)  # type: ignore[arg-type]  # transformers' .to stub
    generator = torch.Generator().manual_seed(TINY_VLM_SEED)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            if "norm" in name and name.endswith("weight"):
                param.fill_(1.0)
            elif "norm" in name or name.endswith("bias"):
                param.zero_()
            else:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.02)
    text = cast(LlamaConfig, config.text_config)
    model.generation_config = GenerationConfig(
        bos_token_id=text.bos_token_id,
        eos_token_id=text.eos_token_id,
        pad_token_id=text.pad_token_id,
    )
    return model.eval()


def save_tiny_vlm(dest: Path) -> None:
    """Write config, fp32 safetensors weights, tokenizer and processor files to ``dest``."""
    tokenizer = build_tiny_vlm_tokenizer()
    model = build_tiny_vlm(tokenizer)
    model.save_pretrained(dest, safe_serialization=True)
    build_tiny_processor(tokenizer).save_pretrained(dest)
