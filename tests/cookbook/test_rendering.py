"""Chat rendering and loss masks, checked against an independent computation: tokenize the whole
rendered text once, with character offsets, and mark the tokens inside assistant turns."""

from __future__ import annotations

import pytest

from loopwright.cookbook.renderers import (
    continuation_tokens,
    extract_code_block,
    render_conversation,
    render_prompt,
    train_on_mode,
)

from .chat_tokenizers import chatml_tokenizer, tiny_tokenizer

# (tokenizer factory, how the template wraps one message: opening, closing after the content)
TEMPLATES = {
    "chatml": (chatml_tokenizer, "<|im_start|>{role}\n", "<|im_end|>"),
    "tiny": (tiny_tokenizer, "<s>{role}\n", "</s>"),
}

CONVERSATIONS = [
    [
        {"role": "user", "content": "What is 23 + 45?"},
        {"role": "assistant", "content": "23 + 45 = 68\n#### 68"},
    ],
    [
        {"role": "system", "content": "You are a concise assistant."},
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "The capital of France is Paris."},
        {"role": "user", "content": "And of Japan?"},
        {"role": "assistant", "content": " Tokyo, of course."},
    ],
]


def expected_weights(
    tokenizer, messages, opening, closing, train_on
) -> tuple[list[int], list[float]]:
    """Tokens of the full rendering, weight 1 on those inside the chosen assistant turns."""
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    spans, cursor = [], 0
    last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    for index, message in enumerate(messages):
        head = opening.format(role=message["role"])
        start = text.index(head + message["content"] + closing, cursor)
        body_start = start + len(head)
        cursor = body_start + len(message["content"]) + len(closing)
        if message["role"] == "assistant" and (train_on == "assistant" or index == last):
            spans.append((body_start, cursor))  # the content and its end-of-turn token
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    weights = [
        1.0 if any(a <= lo and hi <= b for a, b in spans) else 0.0
        for lo, hi in encoded["offset_mapping"]
    ]
    return list(encoded["input_ids"]), weights


@pytest.mark.parametrize("template", sorted(TEMPLATES))
@pytest.mark.parametrize("conversation", range(len(CONVERSATIONS)))
@pytest.mark.parametrize("train_on", ["assistant", "last_assistant"])
def test_mask_matches_an_independent_computation(template, conversation, train_on) -> None:
    factory, opening, closing = TEMPLATES[template]
    tokenizer = factory()
    messages = CONVERSATIONS[conversation]
    rendered = render_conversation(tokenizer, messages, train_on)
    tokens, weights = expected_weights(tokenizer, messages, opening, closing, train_on)
    assert rendered.tokens == tokens
    assert rendered.weights == weights
    assert rendered.trained_tokens > 0
    trained_text = tokenizer.decode([t for t, w in zip(tokens, weights, strict=True) if w])
    assert trained_text.endswith(tokenizer.eos_token)  # the model learns to stop


@pytest.mark.parametrize("template", sorted(TEMPLATES))
def test_the_assistant_turn_follows_the_sampling_prompt(template) -> None:
    """What training sees after the prompt is what the sampler would be asked to continue."""
    tokenizer = TEMPLATES[template][0]()
    messages = CONVERSATIONS[1]
    rendered = render_conversation(tokenizer, messages, "last_assistant")
    prompt = render_prompt(tokenizer, messages[:-1])
    assert rendered.tokens[: len(prompt)] == prompt
    assert not any(rendered.weights[: len(prompt)])
    answer = tokenizer.encode(
        messages[-1]["content"] + tokenizer.eos_token, add_special_tokens=False
    )
    assert rendered.tokens[len(prompt) : len(prompt) + len(answer)] == answer
    assert all(rendered.weights[len(prompt) : len(prompt) + len(answer)])


def test_train_on_all_weights_every_token() -> None:
    rendered = render_conversation(chatml_tokenizer(), CONVERSATIONS[0], "all")
    assert rendered.weights == [1.0] * len(rendered.tokens)


@pytest.mark.parametrize("template", sorted(TEMPLATES))
def test_continuation_adds_the_tool_turn_and_opens_the_next_answer(template) -> None:
    tokenizer = TEMPLATES[template][0]()
    history = [{"role": "user", "content": "Write add."}, {"role": "assistant", "content": "ok"}]
    tool = [{"role": "tool", "content": "2/3 tests passed."}]
    prompt = render_prompt(tokenizer, history[:1])
    sampled = tokenizer.encode("ok" + tokenizer.eos_token, add_special_tokens=False)
    bridge = continuation_tokens(tokenizer, history, tool)
    assert prompt + sampled + bridge == render_prompt(tokenizer, history + tool)


def test_a_template_that_rewrites_history_is_refused() -> None:
    tokenizer = chatml_tokenizer.__wrapped__()  # a fresh one: its template is changed below
    tokenizer.chat_template = (  # earlier answers are elided, as some reasoning templates do
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
        "{% if m['role'] == 'assistant' and not loop.last %}(elided){% else %}{{ m['content'] }}"
        "{% endif %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    with pytest.raises(ValueError, match="extension"):
        render_conversation(tokenizer, CONVERSATIONS[1])
    with pytest.raises(ValueError, match="assistant turn"):
        render_conversation(tokenizer, [{"role": "assistant", "content": "hi"}])


def test_train_on_mode_is_checked() -> None:
    assert train_on_mode("last_assistant") == "last_assistant"
    with pytest.raises(ValueError, match="train_on"):
        train_on_mode("users")


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("Here:\n```python\ndef f():\n    return 1\n```\nDone.", "def f():\n    return 1\n"),
        ("```\nx = 1\n```", "x = 1\n"),
        ("```py\na = 1\n```\nthen\n```python\nb = 2\n```", "b = 2\n"),
        ("def f(): return 1", None),
        ("```python\nunterminated", None),
    ],
)
def test_extract_code_block(text, code) -> None:
    assert extract_code_block(text) == code
