"""The vision recipe's data: generated shape images (seeded, balanced, decodable) and the datums
that put an image chunk where the chat template wrote the image token."""

from __future__ import annotations

import io
import random
from collections import Counter

import pytest
from PIL import Image

from loopwright.cookbook.renderers import RenderedConversation
from loopwright.cookbook.shape_images import SHAPES, draw_shape, shape_examples
from loopwright.cookbook.vision_classifier import image_datum
from loopwright.types import EncodedTextChunk, ImageChunk


def test_the_same_seed_gives_the_same_images_and_another_seed_others() -> None:
    first = shape_examples(12, seed=3)
    assert first == shape_examples(12, seed=3)
    assert [e.png for e in first] != [e.png for e in shape_examples(12, seed=4)]
    held_out = shape_examples(12, seed=3, split="held-out")
    assert not {e.png for e in first} & {e.png for e in held_out}


@pytest.mark.parametrize("n", [3, 31, 100])
def test_labels_are_balanced(n: int) -> None:
    counts = Counter(e.label for e in shape_examples(n, seed=0))
    assert set(counts) == set(SHAPES)
    assert max(counts.values()) - min(counts.values()) <= 1
    two = Counter(e.label for e in shape_examples(10, seed=0, shapes=("circle", "square")))
    assert two == {"circle": 5, "square": 5}


def test_images_decode_as_rgb_pngs_of_the_asked_size() -> None:
    for example in shape_examples(9, seed=1, size=40):
        image = Image.open(io.BytesIO(example.png))
        assert image.format == "PNG" and image.size == (40, 40) and image.mode == "RGB"
        image.load()


def test_each_shape_covers_what_its_geometry_says() -> None:
    """Ink (pixels unlike the background) over the shape's bounding box: a square fills it, a
    circle about π/4 of it, a triangle about half: the classes differ in the pixels."""
    for shape, low, high in [("square", 0.99, 1.0), ("circle", 0.7, 0.85), ("triangle", 0.4, 0.6)]:
        rng = random.Random(5)
        for _ in range(10):
            pixels = draw_shape(shape, rng, size=64).load()
            # a shape spans at most 85% of a side: it covers one image corner at most
            corners = Counter(pixels[x, y] for x in (0, 63) for y in (0, 63))
            background = corners.most_common(1)[0][0]
            ink = [(x, y) for x in range(64) for y in range(64) if pixels[x, y] != background]
            xs, ys = [p[0] for p in ink], [p[1] for p in ink]
            box = (max(xs) - min(xs) + 1) * (max(ys) - min(ys) + 1)
            assert low <= len(ink) / box <= high, (shape, len(ink) / box)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown shape"):
        draw_shape("hexagon", random.Random(0))
    with pytest.raises(ValueError, match="at least 8"):
        draw_shape("circle", random.Random(0), size=4)
    with pytest.raises(ValueError, match="distinct"):
        shape_examples(4, seed=0, shapes=("circle", "circle"))


def test_an_image_datum_expands_the_image_token_into_an_image_chunk() -> None:
    image_id, per_image = 259, 16
    png = shape_examples(1, seed=0)[0].png
    # "<s>u\n" <image> "q</s>" | "a" "</s>" trained
    tokens = [1, 117, 10, image_id, 113, 2, 97, 2]
    weights = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0]
    datum = image_datum(RenderedConversation(tokens, weights), [png], image_id, per_image, 0.5)
    chunks = datum.model_input.chunks
    assert isinstance(chunks[0], EncodedTextChunk) and chunks[0].tokens == [1, 117, 10]
    assert isinstance(chunks[1], ImageChunk) and chunks[1].data == png
    assert chunks[1].expected_tokens == per_image
    assert isinstance(chunks[2], EncodedTextChunk) and chunks[2].tokens == [113, 2, 97]
    n = 3 + per_image + 3  # the input: every position but the last
    assert datum.model_input.length == n
    targets = datum.loss_fn_inputs["target_tokens"].tolist()
    got_weights = datum.loss_fn_inputs["weights"].tolist()
    # position i predicts position i + 1 of the expanded sequence
    assert targets == [117, 10] + [0] * per_image + [113, 2, 97, 2]
    assert got_weights == [0.0, 0.0] + [0.0] * per_image + [0.0, 0.0, 0.5, 0.5]
    with pytest.raises(ValueError, match="1 images but 2"):
        image_datum(RenderedConversation(tokens, weights), [png, png], image_id, per_image)


def test_without_pillow_the_error_names_the_extra(monkeypatch) -> None:
    import sys

    from loopwright.cookbook.shape_images import pillow

    for name in ("PIL", "PIL.Image", "PIL.ImageDraw"):
        monkeypatch.setitem(sys.modules, name, None)  # import PIL raises ImportError
    with pytest.raises(ImportError, match=r"loopwright\[cookbook-vision\]"):
        pillow()
    with pytest.raises(ImportError, match="cookbook-vision"):
        shape_examples(1, seed=0)
