"""Images in a model's input: decoded safely, checked, and turned into what a vision-language
model reads (its image placeholder tokens in the sequence, and pixel tensors beside it).

An image chunk becomes as many image tokens as the model's processor makes of it; a request that
declared ``expected_tokens`` must have declared exactly that. The pixel tensors of a row's images
travel with the row; a batch concatenates its rows' tensors in row order, which is the order the
model fills its image tokens in.
"""

from __future__ import annotations

import base64
import io
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from transformers import AutoProcessor
from transformers.utils import logging as hf_logging

from .errors import InvalidInput

# Attacker-pushable sizes, bounded before anything is decoded or allocated.
MAX_IMAGE_BYTES = 10 << 20  # encoded bytes of one image
MAX_IMAGE_PIXELS = 4096 * 4096  # width × height of one image
MAX_IMAGE_SIDE = 8192  # either side of one image, in pixels
MAX_IMAGES_PER_INPUT = 16
FORMATS = {"png": "PNG", "jpeg": "JPEG"}

Pixels = dict[
    str, torch.Tensor
]  # the processor's image tensors (pixel_values, ...), dim 0 per image


@dataclass(frozen=True)
class ExpandedInput:
    """A model input as the model reads it: token ids with each image as its placeholder tokens,
    and the images' pixel tensors (None: no image)."""

    tokens: list[int]
    pixels: Pixels | None
    image_tokens: int  # how many of ``tokens`` stand for images


def decode_image(data: bytes | str, fmt: str, field: str) -> Image.Image:
    """The RGB image of an image chunk's bytes, refused when it is not what it says it is or is
    larger than the limits allow (checked from the header, before the pixels are decoded)."""
    if isinstance(data, str):
        if len(data) > (MAX_IMAGE_BYTES * 4) // 3 + 4:
            raise InvalidInput(f"{field}.data", f"is over the limit of {MAX_IMAGE_BYTES} bytes")
        try:
            data = base64.b64decode(data, validate=True)
        except ValueError as exc:
            raise InvalidInput(f"{field}.data", f"is not base64 ({exc})") from exc
    if len(data) > MAX_IMAGE_BYTES:
        raise InvalidInput(
            f"{field}.data", f"has {len(data)} bytes, over the limit of {MAX_IMAGE_BYTES}"
        )
    if fmt not in FORMATS:
        raise InvalidInput(f"{field}.format", f"{fmt!r} is not one of {sorted(FORMATS)}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=[FORMATS[fmt]]) as probe:
                width, height = probe.size
                _check_size(width, height, f"{field}.data")
                probe.verify()
            image = Image.open(io.BytesIO(data), formats=[FORMATS[fmt]])
            image.load()
    except InvalidInput:
        raise
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombWarning) as exc:
        raise InvalidInput(f"{field}.data", f"is not a valid {fmt} image ({exc})") from exc
    return image.convert("RGB")


def _check_size(width: int, height: int, field: str) -> None:
    if max(width, height) > MAX_IMAGE_SIDE or width * height > MAX_IMAGE_PIXELS:
        raise InvalidInput(
            field,
            f"is {width}×{height} pixels, over the limit of {MAX_IMAGE_SIDE} per side "
            f"and {MAX_IMAGE_PIXELS} in all",
        )


class VisionInputs:
    """A vision-language model's processor and image token, from its HF folder."""

    def __init__(self, folder: Path, vocab_size: int, image_token_id: int) -> None:
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # the slow-backend notice of some image processors
        try:
            self.processor = AutoProcessor.from_pretrained(folder)
        finally:
            hf_logging.set_verbosity(verbosity)
        self.image_token_id = int(image_token_id)
        self.image_token = self.processor.tokenizer.convert_ids_to_tokens(self.image_token_id)
        self.vocab_size = vocab_size
        self.tokens_per_image = self._fixed_count()

    def _fixed_count(self) -> int:
        """The tokens every image takes, when that does not depend on the image (0: it does)."""
        counts = set()
        for size in ((32, 32), (640, 97), (97, 640)):
            image = Image.new("RGB", size, (127, 127, 127))
            out = self.processor(text=[self.image_token], images=[image], return_tensors="pt")
            counts.add(int((out["input_ids"] == self.image_token_id).sum()))
        return counts.pop() if len(counts) == 1 else 0

    def image(self, chunk: object, field: str) -> tuple[int, Pixels]:
        """How many image tokens an image chunk takes, and its pixel tensors."""
        image = decode_image(chunk.data, chunk.format, field)  # type: ignore[attr-defined]
        dims = getattr(chunk, "override_dimensions", None)
        if dims is not None:  # the client's size for it: its token count follows
            _check_size(dims.width, dims.height, f"{field}.override_dimensions")
            image = image.resize((dims.width, dims.height), Image.Resampling.BICUBIC)
        out = self.processor(text=[self.image_token], images=[image], return_tensors="pt")
        count = int((out["input_ids"] == self.image_token_id).sum())
        expected = getattr(chunk, "expected_tokens", None)
        if expected is not None and expected != count:
            raise InvalidInput(
                f"{field}.expected_tokens",
                f"declares {expected} tokens; this model's processor makes {count} of the image",
            )
        pixels = {k: v for k, v in out.items() if k not in ("input_ids", "attention_mask")}
        return count, pixels

    def expand(self, model_input: object, field: str) -> ExpandedInput:
        """Token chunks as they are, each image chunk as its image tokens; a token chunk may
        not hold the image token itself (it would stand for no image)."""
        tokens: list[int] = []
        pixels: list[Pixels] = []
        image_tokens = 0
        chunks = model_input.chunks  # type: ignore[attr-defined]
        images = sum(1 for c in chunks if c.type != "encoded_text")
        if images > MAX_IMAGES_PER_INPUT:
            raise InvalidInput(
                f"{field}.chunks", f"holds {images} images, over the limit {MAX_IMAGES_PER_INPUT}"
            )
        for k, chunk in enumerate(chunks):
            where = f"{field}.chunks[{k}]"
            if chunk.type == "encoded_text":
                if self.image_token_id in chunk.tokens:
                    i = chunk.tokens.index(self.image_token_id)
                    raise InvalidInput(
                        f"{where}.tokens",
                        f"token {self.image_token_id} at position {i} is the image token; "
                        "send the image as an image chunk",
                    )
                tokens += chunk.tokens
            elif chunk.type == "image":
                count, image = self.image(chunk, where)
                tokens += [self.image_token_id] * count
                image_tokens += count
                pixels.append(image)
            else:
                raise InvalidInput(
                    f"{where}.type", f"{chunk.type!r} is not supported; send the image inline"
                )
        return ExpandedInput(tokens, concat_pixels(pixels), image_tokens)


def concat_pixels(parts: Sequence[Pixels | None]) -> Pixels | None:
    """Several inputs' image tensors as one batch's, in order (None: no image among them)."""
    present = [p for p in parts if p]
    if not present:
        return None
    return {k: torch.cat([p[k] for p in present]) for k in present[0]}


def image_count(pixels: Pixels | None) -> int:
    """How many images an input's tensors hold (dim 0 is one per image)."""
    if not pixels:
        return 0
    return int(next(iter(pixels.values())).shape[0])


def pixels_to(pixels: Pixels | None, device: torch.device, dtype: torch.dtype) -> Pixels:
    """Keyword arguments for the model: floating tensors in the model's dtype."""
    if pixels is None:
        return {}
    return {
        k: v.to(device, dtype) if v.is_floating_point() else v.to(device) for k, v in pixels.items()
    }


def image_token_id_of(config: object) -> int | None:
    """The image placeholder token of a vision-language config (None: not one)."""
    for name in ("image_token_index", "image_token_id"):
        value = getattr(config, name, None)
        if isinstance(value, int):
            return value
    return None


def tokens_array(expanded: ExpandedInput) -> np.ndarray:
    return np.asarray(expanded.tokens, dtype=np.int64)
