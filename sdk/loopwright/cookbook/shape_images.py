"""Images of simple shapes for the vision recipe, drawn with Pillow (nothing is downloaded).

Each example is one shape (circle, square or triangle) at a random position and size, in a
random colour on a random light background; the label is the shape's name. The same seed gives
the same images, byte for byte, and every class gets the same number of examples (±1).

Pillow is not a dependency of the SDK: ``pip install 'loopwright[cookbook-vision]'``.
"""

from __future__ import annotations

import io
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from PIL import Image

__all__ = ["SHAPES", "ShapeExample", "draw_shape", "pillow", "shape_examples"]

SHAPES: tuple[str, ...] = ("circle", "square", "triangle")

INSTALL_HINT = "pip install 'loopwright[cookbook-vision]'"


def pillow() -> Any:
    """The ``PIL`` package, or an ImportError that says which extra to install."""
    try:
        import PIL.Image
        import PIL.ImageDraw
    except ImportError as exc:
        raise ImportError(
            f"the vision recipe draws its images with Pillow, which is not installed: {INSTALL_HINT}"
        ) from exc
    return PIL


@dataclass(frozen=True)
class ShapeExample:
    """One labelled image."""

    label: str
    """The shape's name (one of the classes)."""

    png: bytes
    """The image, PNG-encoded."""


def _colour(rng: random.Random, low: int, high: int) -> tuple[int, int, int]:
    return (rng.randint(low, high), rng.randint(low, high), rng.randint(low, high))


def draw_shape(
    shape: str, rng: random.Random, size: int = 32, variation: float = 1.0
) -> Image.Image:
    """An RGB ``size``×``size`` image of ``shape``, dark on light. ``variation`` 1: its extent
    is 40–85% of the side, placed anywhere it fits, fill and background colours drawn at random;
    0: black, 85% of the side, centred on white; in between, the ranges shrink towards that."""
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}; one of {', '.join(SHAPES)}")
    if size < 8:
        raise ValueError(f"image size must be at least 8 pixels, got {size}")
    if not 0.0 <= variation <= 1.0:
        raise ValueError(f"variation must be between 0 and 1, got {variation}")
    pil = pillow()
    image = pil.Image.new("RGB", (size, size), _colour(rng, 255 - round(55 * variation), 255))
    draw = pil.ImageDraw.Draw(image)
    largest = round(size * 0.85)
    extent = rng.randint(largest - round(size * 0.45 * variation), largest)
    slack = size - extent
    centre = slack // 2
    left = rng.randint(
        centre - round(centre * variation), centre + round((slack - centre) * variation)
    )
    top = rng.randint(
        centre - round(centre * variation), centre + round((slack - centre) * variation)
    )
    box = (left, top, left + extent - 1, top + extent - 1)
    fill = _colour(rng, 0, round(150 * variation))
    if shape == "circle":
        draw.ellipse(box, fill=fill)
    elif shape == "square":
        draw.rectangle(box, fill=fill)
    else:  # an upright triangle filling the box's width and height
        draw.polygon([(left, box[3]), (box[2], box[3]), (left + (extent - 1) / 2, top)], fill=fill)
    return image


def encode_png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def shape_examples(
    n: int,
    seed: int,
    shapes: tuple[str, ...] = SHAPES,
    size: int = 32,
    split: str = "train",
    variation: float = 1.0,
) -> list[ShapeExample]:
    """``n`` labelled images: the classes in turn (balanced), then shuffled, all drawn from
    ``seed`` and ``split`` (another split name gives other images)."""
    if n < 0:
        raise ValueError(f"n must be at least 0, got {n}")
    if len(set(shapes)) != len(shapes) or not shapes:
        raise ValueError(f"shapes must be distinct and not empty, got {shapes}")
    rng = random.Random(f"shapes:{split}:{seed}")
    labels = [shapes[i % len(shapes)] for i in range(n)]
    rng.shuffle(labels)
    return [
        ShapeExample(label, encode_png(draw_shape(label, rng, size, variation))) for label in labels
    ]
