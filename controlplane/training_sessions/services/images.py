"""The images of a request's model inputs, checked when it arrives: the base model must take
images, each must be a png or jpeg within the size limits (read from its header; its pixels
never decoded here), and a declared ``expected_tokens`` must be what the base model makes of an
image. A base model whose images always take the same number of tokens has that number written
into each image that did not declare it, so counting, context checks and metering see it. The
worker checks everything again with the model's own processor."""

from __future__ import annotations

import base64
import binascii
import io
import warnings
from collections.abc import Iterator

from PIL import Image

from controlplane.errors import DomainError
from controlplane.fleet.models import BaseModel

MAX_IMAGE_BYTES = 10 << 20  # encoded bytes of one image
MAX_IMAGE_PIXELS = 4096 * 4096  # width × height of one image
MAX_IMAGE_SIDE = 8192  # either side of one image
MAX_IMAGES_PER_INPUT = 16
_FORMATS = {"png": "PNG", "jpeg": "JPEG"}


def batch_inputs(batch: dict | None, field: str) -> Iterator[tuple[str, dict]]:
    """Each datum's model input of a forward(-backward) batch (its JSON), with its field."""
    for i, datum in enumerate((batch or {}).get("data") or ()):
        model_input = (datum or {}).get("model_input")
        if isinstance(model_input, dict):
            yield f"{field}[{i}].model_input", model_input


def has_images(model_input: dict | None) -> bool:
    chunks = (model_input or {}).get("chunks") or ()
    return any(
        isinstance(c, dict) and c.get("type", "encoded_text") != "encoded_text" for c in chunks
    )


def images_check(*, base_model: str, inputs: Iterator[tuple[str, dict]]) -> None:
    """Refuse (400 naming the field) an image the base model cannot take or that breaks a
    limit; write the base model's token count into images that did not declare one."""
    per_image: int | bool | None = False  # not looked up yet
    for field, model_input in inputs:
        chunks = model_input.get("chunks") or ()
        images = [
            k for k, c in enumerate(chunks) if c.get("type", "encoded_text") != "encoded_text"
        ]
        if not images:
            continue
        if per_image is False:
            per_image = (
                BaseModel.objects.filter(name=base_model)
                .values_list("image_tokens", flat=True)
                .first()
            )
        if per_image is None:
            raise DomainError(
                f"{field}.chunks[{images[0]}]: base model {base_model!r} takes no images "
                "(a text model); send token chunks only",
                field=f"{field}.chunks[{images[0]}]",
            )
        if len(images) > MAX_IMAGES_PER_INPUT:
            raise DomainError(
                f"{field}.chunks: {len(images)} images, over the limit of {MAX_IMAGES_PER_INPUT}",
                field=f"{field}.chunks",
            )
        for k in images:
            _image_check(chunks[k], f"{field}.chunks[{k}]", int(per_image))


def _image_check(chunk: dict, field: str, per_image: int) -> None:
    if chunk.get("type") != "image":
        raise DomainError(
            f"{field}.type: {chunk.get('type')!r} chunks are not served; send the image's bytes "
            "inline as an image chunk",
            field=f"{field}.type",
        )
    image_size(chunk.get("data"), chunk.get("format"), field)
    dims = chunk.get("override_dimensions")
    if isinstance(dims, dict):
        _size_check(int(dims["width"]), int(dims["height"]), f"{field}.override_dimensions")
    expected = chunk.get("expected_tokens")
    if per_image and expected is not None and expected != per_image:
        raise DomainError(
            f"{field}.expected_tokens: declares {expected} tokens; this base model makes "
            f"{per_image} tokens of every image",
            field=f"{field}.expected_tokens",
        )
    if per_image and expected is None:
        chunk["expected_tokens"] = per_image


def image_size(data: object, fmt: object, field: str) -> tuple[int, int]:
    """Width and height of an image chunk's bytes (base64 text), refused when they are not a
    whole image of the declared format or break a limit."""
    if not isinstance(data, str | bytes):
        raise DomainError(f"{field}.data: must be base64 text", field=f"{field}.data")
    if isinstance(data, str):
        if len(data) > (MAX_IMAGE_BYTES * 4) // 3 + 4:
            raise DomainError(
                f"{field}.data: over the limit of {MAX_IMAGE_BYTES} bytes", field=f"{field}.data"
            )
        try:
            data = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise DomainError(f"{field}.data: is not base64", field=f"{field}.data") from None
    if len(data) > MAX_IMAGE_BYTES:
        raise DomainError(
            f"{field}.data: {len(data)} bytes, over the limit of {MAX_IMAGE_BYTES}",
            field=f"{field}.data",
        )
    if fmt not in _FORMATS:
        raise DomainError(
            f"{field}.format: {fmt!r} is not one of {sorted(_FORMATS)}", field=f"{field}.format"
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=[_FORMATS[str(fmt)]]) as image:
                width, height = image.size
                _size_check(width, height, f"{field}.data")
                image.verify()
    except DomainError:
        raise
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombWarning) as exc:
        raise DomainError(
            f"{field}.data: not a valid {fmt} image ({exc})", field=f"{field}.data"
        ) from None
    return width, height


def _size_check(width: int, height: int, field: str) -> None:
    if max(width, height) > MAX_IMAGE_SIDE or width * height > MAX_IMAGE_PIXELS:
        raise DomainError(
            f"{field}: {width}×{height} pixels, over the limit of {MAX_IMAGE_SIDE} per side "
            f"and {MAX_IMAGE_PIXELS} in all",
            field=field,
        )
