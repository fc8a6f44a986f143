"""Images of chat messages (``image_url`` content parts) as the image chunks of a prompt: only
``data:`` URIs of png or jpeg, base64; a remote URL is never fetched (a 400 naming the part)."""

from __future__ import annotations

from controlplane.completions.rendering import RenderError

_FORMATS = {"image/png": "png", "image/jpeg": "jpeg", "image/jpg": "jpeg"}


def image_chunk(url: str, field: str) -> dict:
    """The image chunk of a ``data:image/<png|jpeg>;base64,<data>`` URI. Its bytes are checked
    when the prompt is submitted, as any image chunk's are."""
    if not url.startswith("data:"):
        raise RenderError(
            f"{field}: only data: URIs are accepted (data:image/png;base64,...); remote "
            "images are not fetched",
            field=field,
        )
    header, sep, data = url[len("data:") :].partition(",")
    media, _, encoding = header.partition(";")
    if not sep or encoding != "base64" or media.lower() not in _FORMATS:
        raise RenderError(
            f"{field}: expected data:image/png;base64,... or data:image/jpeg;base64,...",
            field=field,
        )
    return {"type": "image", "data": data, "format": _FORMATS[media.lower()]}
