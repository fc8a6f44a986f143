"""Tokenizers for rendering tests, built offline: the tiny model's byte-level one and a small
ChatML BPE (trained here in a moment, so merges cross message boundaries as real ones do)."""

from __future__ import annotations

import functools

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from workers.engine.tiny_model import build_tiny_tokenizer

# SmolLM2-Instruct's template: ChatML with a default system prompt when none is given.
CHATML_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

CORPUS = [
    "What is 23 + 45? 23 + 45 = 68 #### 68",
    "The capital of France is Paris. The capital of Japan is Tokyo.",
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face",
    "system user assistant tool hello world, how are you today? I am fine, thank you.",
    "def add(a, b):\n    return a + b\n",
] * 20


@functools.cache
def tiny_tokenizer() -> PreTrainedTokenizerFast:
    return build_tiny_tokenizer()


@functools.cache
def chatml_tokenizer() -> PreTrainedTokenizerFast:
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=["<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(CORPUS, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token="<|im_end|>", chat_template=CHATML_TEMPLATE
    )
