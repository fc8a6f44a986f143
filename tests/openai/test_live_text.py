"""A choice's text while its tokens arrive: what is held back (a split character, the start of
a possible stop sequence), gaps filled from the finished choice, and the whole stream equal to
the finished choice for random texts, stops and deliveries (missed, repeated, out of order)."""

from __future__ import annotations

import random

import pytest

from controlplane.completions.live_text import ChoiceText, sendable
from controlplane.completions.rendering import REPLACEMENT, choice_of

from .test_rendering import EOS, ids, seq, tok  # noqa: F401  (tok: the tiny tokenizer fixture)


def sendable_by_search(text: str, stops: list[str]) -> int:
    """The reference: the earliest place from which the rest of the text is, or begins, a stop
    sequence, tried position by position."""
    end = len(text)
    while end and text[end - 1] == REPLACEMENT:
        end -= 1
    for p in range(len(text) + 1):
        if any(text[p : p + len(s)] == s for s in stops):
            return p
    for p in range(end):
        if any(s.startswith(text[p:end]) for s in stops):
            return p
    return end


@pytest.mark.parametrize(
    ("text", "stops", "expected"),
    [
        ("hello", [], 5),
        ("hello wor", ["world"], 6),  # "wor" may become "world"
        ("hello world!", ["world"], 6),  # found: nothing from it on
        ("abab", ["ababc", "b"], 1),  # the first stop found wins
        ("xaba", ["abab"], 1),  # the longest end a stop begins with
        ("caf" + REPLACEMENT, [], 3),  # half a character waits
        ("caf" + REPLACEMENT, ["é!"], 3),
        ("", ["a"], 0),
    ],
)
def test_sendable(text: str, stops: list[str], expected: int) -> None:
    assert sendable(text, stops) == expected == sendable_by_search(text, stops)


def test_sendable_agrees_with_a_search_on_random_texts() -> None:
    rng = random.Random(7)
    for _ in range(3000):
        text = "".join(rng.choice("ab\ufffd") for _ in range(rng.randrange(0, 9)))
        stops = ["".join(rng.choice("ab") for _ in range(rng.randrange(1, 5))) for _ in range(2)]
        assert sendable(text, stops) == sendable_by_search(text, stops), (text, stops)


def streamed(tok, stream: ChoiceText, final, deliveries) -> tuple[str, list, list[str]]:  # noqa: F811
    """Feed ``deliveries`` (lists of positions), then finish; the text and pieces sent, and
    the text sent at each step before the end."""
    tokens, logprobs = final["tokens"], final["logprobs"]
    text, pieces, steps = "", [], []
    for batch in deliveries:
        for p in batch:
            stream.add(p, tokens[p], logprobs[p], None)
        update = stream.update()
        if update is not None:
            text += update.text
            pieces += update.pieces
        steps.append(text)
    rest = stream.finish(choice_of(tok, final, stream.stops, EOS))
    return text + rest.text, pieces + rest.pieces, steps


def test_a_split_character_waits_for_its_end(tok) -> None:  # noqa: F811
    stream = ChoiceText(tok, [])
    final = seq(ids("é!"))
    text, _, steps = streamed(tok, stream, final, [[0], [1], [2]])
    assert steps == ["", "é", "é!"] and text == "é!"


def test_a_possible_stop_sequence_is_held_back_and_never_sent(tok) -> None:  # noqa: F811
    stream = ChoiceText(tok, ["END"])
    final = seq(ids("abENDxy"), "stop")
    text, pieces, steps = streamed(tok, stream, final, [[0, 1], [2], [3], [4], [5, 6]])
    assert steps == ["ab", "ab", "ab", "ab", "ab"] and text == "ab"
    assert [p.token_id for p in pieces] == ids("ab")


def test_missed_tokens_are_filled_from_the_finished_choice(tok) -> None:  # noqa: F811
    stream = ChoiceText(tok, [])
    final = seq(ids("hello"))
    # position 2 never arrives; 4 comes twice; 3 before the gap is known
    text, pieces, steps = streamed(tok, stream, final, [[0, 1], [3], [4, 4], [1]])
    assert steps == ["he", "he", "he", "he"]
    assert text == "hello" and [p.token_id for p in pieces] == ids("hello")
    assert [p.offset for p in pieces] == [0, 1, 2, 3, 4]


def test_late_tokens_fill_the_gap_as_they_come(tok) -> None:  # noqa: F811
    stream = ChoiceText(tok, [])
    final = seq(ids("hello"))
    _, _, steps = streamed(tok, stream, final, [[0, 2], [3], [1]])
    assert steps == ["h", "h", "hell"]


TEXTS = ["plain words", "café au lait", "€ and ✓ and 🙂", "a\nb\tc", "stop here. and more"]


def test_any_delivery_sends_the_finished_choice_once_in_order(tok) -> None:  # noqa: F811
    rng = random.Random(11)
    for round_ in range(300):
        words = rng.choice(TEXTS)
        stop_at = rng.random() < 0.3
        tokens = ids(words) + ([EOS] if stop_at else [])
        final = seq(tokens, "stop" if stop_at else "length")
        final["logprobs"] = [-0.01 * (i + 1) for i in range(len(tokens))]
        stops = []
        if rng.random() < 0.7:
            start = rng.randrange(len(words))
            stops.append(words[start : start + rng.randrange(1, 4)])
        if rng.random() < 0.3:
            stops.append("never-there")
        positions = list(range(len(tokens)))
        if round_ % 3:  # some missed, some repeated, a few out of order
            positions = [p for p in positions if rng.random() > 0.15]
            positions += rng.sample(positions, k=len(positions) // 4)
            rng.shuffle(positions)
        deliveries = []
        while positions:
            k = rng.randrange(1, 4)
            deliveries.append(positions[:k])
            positions = positions[k:]
        expected = choice_of(tok, final, stops, EOS)
        text, pieces, steps = streamed(tok, ChoiceText(tok, stops), final, deliveries)
        assert text == expected.text, (words, stops, deliveries)
        assert [(p.token_id, p.offset, p.logprob) for p in pieces] == [
            (p.token_id, p.offset, p.logprob) for p in expected.pieces
        ]
        assert all(expected.text.startswith(s) for s in steps)
