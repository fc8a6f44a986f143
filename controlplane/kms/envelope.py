"""LWENC1: a streaming, self-describing, authenticated envelope for blobs of any size.

Each blob gets a fresh AES-256 data key, wrapped by its tenant's key and kept in the header.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import os
import struct
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, BinaryIO

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .keyring import (
    KEY_SIZE,
    PROVIDERS,
    TAG_SIZE,
    ContextMismatchError,
    KeyProvider,
    KeyRef,
    KmsError,
    TamperedError,
    canonical_json,
    ensure_usable,
    normalize_context,
)

# Layout: MAGIC | u32 big-endian header length | canonical JSON header | chunks.
# Chunk i = AES-256-GCM(data key, nonce = nonce_prefix || u32 i,
#                       aad = SHA-256(MAGIC | length | JSON) || u32 i || final flag byte).
# Every chunk but the last holds exactly chunk_size plaintext bytes; the last one has final=1
# (and is empty only when the whole blob is empty).
MAGIC = b"LWENC1\n"
FORMAT_VERSION = 1
DEFAULT_CHUNK_SIZE = 1 << 20
MAX_CHUNK_SIZE = 1 << 26
MAX_HEADER_SIZE = 1 << 16
NONCE_PREFIX_SIZE = 8
MAX_CHUNKS = 1 << 32
_U32 = struct.Struct(">I")
PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class Header:
    """What a sealed blob says about itself; nothing in it is trusted until the blob opens."""

    key_arn: str
    provider: str
    key_version: int
    context: Mapping[str, str]
    chunk_size: int
    wrapped_key: bytes = field(repr=False)
    nonce_prefix: bytes = field(repr=False)
    format_version: int = FORMAT_VERSION

    @cached_property
    def raw(self) -> bytes:
        """The encoded header (magic, length, canonical JSON): the only encoding accepted."""
        body = canonical_json(
            {
                "format": self.format_version,
                "key_arn": self.key_arn,
                "provider": self.provider,
                "key_version": self.key_version,
                "wrapped_key": _b64(self.wrapped_key),
                "context": dict(self.context),
                "chunk_size": self.chunk_size,
                "nonce_prefix": _b64(self.nonce_prefix),
            }
        )
        return MAGIC + _U32.pack(len(body)) + body

    @cached_property
    def digest(self) -> bytes:
        """SHA-256 of ``raw``; part of every chunk's associated data."""
        return hashlib.sha256(self.raw).digest()


@dataclass(frozen=True)
class SealedInfo:
    """What ``seal_*`` wrote."""

    header: Header
    plaintext_size: int
    sealed_size: int
    chunks: int


@dataclass(frozen=True)
class OpenedInfo:
    """What ``open_*`` verified and wrote."""

    header: Header
    plaintext_size: int
    chunks: int


def seal_stream(
    src: BinaryIO,
    dst: BinaryIO,
    *,
    key: KeyRef,
    provider: KeyProvider,
    context: Mapping[str, str],
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> SealedInfo:
    """Encrypt everything ``src`` yields into ``dst`` under a fresh data key wrapped by ``key``."""
    _check_chunk_size(chunk_size)
    ctx = normalize_context(context)
    ensure_usable(key)
    data_key, wrapped, version = provider.generate_data_key(key, ctx)
    header = _build_header(key, version, wrapped, ctx, chunk_size)
    dst.write(header.raw)
    chunks, size = _seal_chunks(src, dst, _aead(data_key), header)
    sealed_size = len(header.raw) + size + chunks * TAG_SIZE
    return SealedInfo(header=header, plaintext_size=size, sealed_size=sealed_size, chunks=chunks)


def open_stream(
    src: BinaryIO,
    dst: BinaryIO,
    *,
    key_lookup: Callable[[str], KeyRef],
    provider_for_key: Callable[[KeyRef], KeyProvider],
    expected_context: Mapping[str, str],
) -> OpenedInfo:
    """Verify and decrypt ``src`` into ``dst``.

    Chunks are written as each one authenticates; if this raises, what ``dst`` received must be
    discarded (``open_bytes`` and ``open_file`` do that). ``key_lookup`` gets the ARN named in the
    header and should raise ``KeyNotFoundError`` for an unknown one.
    """
    header = _parse_header(src)
    _check_context(header, normalize_context(expected_context))
    key = key_lookup(header.key_arn)
    if key.arn != header.key_arn:
        raise KmsError(f"looking up {header.key_arn} returned another key, {key.arn}")
    if key.provider != header.provider:
        raise TamperedError(
            f"the header says provider {header.provider}, but key {key.arn} is {key.provider}"
        )
    ensure_usable(key)
    data_key = provider_for_key(key).decrypt_data_key(
        key, header.wrapped_key, header.key_version, header.context
    )
    chunks, size = _open_chunks(src, dst, _aead(data_key), header)
    return OpenedInfo(header=header, plaintext_size=size, chunks=chunks)


def seal_bytes(
    data: bytes,
    *,
    key: KeyRef,
    provider: KeyProvider,
    context: Mapping[str, str],
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> bytes:
    """``data`` sealed in memory."""
    out = io.BytesIO()
    seal_stream(
        io.BytesIO(data), out, key=key, provider=provider, context=context, chunk_size=chunk_size
    )
    return out.getvalue()


def open_bytes(
    blob: bytes,
    *,
    key_lookup: Callable[[str], KeyRef],
    provider_for_key: Callable[[KeyRef], KeyProvider],
    expected_context: Mapping[str, str],
) -> bytes:
    """The plaintext of an in-memory sealed blob."""
    out = io.BytesIO()
    open_stream(
        io.BytesIO(blob),
        out,
        key_lookup=key_lookup,
        provider_for_key=provider_for_key,
        expected_context=expected_context,
    )
    return out.getvalue()


def seal_file(
    path_in: PathLike,
    path_out: PathLike,
    *,
    key: KeyRef,
    provider: KeyProvider,
    context: Mapping[str, str],
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> SealedInfo:
    """Seal one file into another; ``path_out`` appears complete or not at all."""
    with open(path_in, "rb") as src, _atomic_output(path_out) as dst:
        return seal_stream(
            src, dst, key=key, provider=provider, context=context, chunk_size=chunk_size
        )


def open_file(
    path_in: PathLike,
    path_out: PathLike,
    *,
    key_lookup: Callable[[str], KeyRef],
    provider_for_key: Callable[[KeyRef], KeyProvider],
    expected_context: Mapping[str, str],
) -> OpenedInfo:
    """Open one sealed file into another; ``path_out`` appears only once everything verified."""
    with open(path_in, "rb") as src, _atomic_output(path_out) as dst:
        return open_stream(
            src,
            dst,
            key_lookup=key_lookup,
            provider_for_key=provider_for_key,
            expected_context=expected_context,
        )


def is_sealed(path_or_bytes: PathLike | bytes | bytearray | memoryview) -> bool:
    """Whether a file (str or path) or a bytes-like value starts with the LWENC1 magic."""
    if isinstance(path_or_bytes, bytes | bytearray | memoryview):
        return bytes(path_or_bytes[: len(MAGIC)]) == MAGIC
    with open(path_or_bytes, "rb") as f:
        return f.read(len(MAGIC)) == MAGIC


def read_header(src: BinaryIO | PathLike | bytes) -> Header:
    """The header of a sealed stream, file or bytes value, without decrypting anything.

    Nothing in it is authenticated until the blob is opened.
    """
    if isinstance(src, bytes):
        return _parse_header(io.BytesIO(src))
    if isinstance(src, str | os.PathLike):
        with open(src, "rb") as f:
            return _parse_header(f)
    return _parse_header(src)


def _check_chunk_size(chunk_size: int) -> None:
    if isinstance(chunk_size, bool) or not 1 <= chunk_size <= MAX_CHUNK_SIZE:
        raise ValueError(f"chunk_size must be between 1 and {MAX_CHUNK_SIZE}, got {chunk_size}")


def _aead(data_key: bytes) -> AESGCM:
    if len(data_key) != KEY_SIZE:
        raise TamperedError(f"the data key is {len(data_key)} bytes, not {KEY_SIZE}")
    return AESGCM(data_key)


def _build_header(
    key: KeyRef, version: int, wrapped: bytes, context: dict[str, str], chunk_size: int
) -> Header:
    header = Header(
        key_arn=key.arn,
        provider=key.provider,
        key_version=version,
        context=context,
        chunk_size=chunk_size,
        wrapped_key=wrapped,
        nonce_prefix=os.urandom(NONCE_PREFIX_SIZE),
    )
    if len(header.raw) > MAX_HEADER_SIZE:
        raise KmsError(f"the header would be {len(header.raw)} bytes (limit {MAX_HEADER_SIZE})")
    return header


def _parse_header(src: BinaryIO) -> Header:
    preamble = _read_full(src, len(MAGIC) + _U32.size)
    if preamble[: len(MAGIC)] != MAGIC:
        raise TamperedError("not an LWENC1 blob: the magic bytes are missing or altered")
    if len(preamble) != len(MAGIC) + _U32.size:
        raise TamperedError("the blob ends inside its header")
    (length,) = _U32.unpack(preamble[len(MAGIC) :])
    if not 0 < length <= MAX_HEADER_SIZE:
        raise TamperedError(f"implausible header length {length}")
    body = _read_full(src, length)
    if len(body) != length:
        raise TamperedError("the blob ends inside its header")
    header = _header_from_json(body)
    if header.raw != preamble + body:
        raise TamperedError("malformed LWENC1 header: not the canonical encoding")
    return header


def _header_from_json(body: bytes) -> Header:
    try:
        doc = json.loads(body.decode("utf-8"))
        header = Header(
            key_arn=_typed(doc, "key_arn", str),
            provider=_typed(doc, "provider", str),
            key_version=_typed(doc, "key_version", int),
            context=normalize_context(_typed(doc, "context", dict)),
            chunk_size=_typed(doc, "chunk_size", int),
            wrapped_key=_unb64(_typed(doc, "wrapped_key", str)),
            nonce_prefix=_unb64(_typed(doc, "nonce_prefix", str)),
            format_version=_typed(doc, "format", int),
        )
        _check_header_values(header)
    except KeyError as exc:
        raise TamperedError(f"malformed LWENC1 header: no field {exc}") from None
    except (ValueError, TypeError) as exc:
        raise TamperedError(f"malformed LWENC1 header: {exc}") from None
    return header


def _typed(doc: dict[str, Any], name: str, kind: type) -> Any:
    value = doc[name]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise TypeError(f"{name} should be of type {kind.__name__}")
    return value


def _check_header_values(header: Header) -> None:
    if header.format_version != FORMAT_VERSION:
        raise ValueError(f"unsupported format version {header.format_version}")
    if header.provider not in PROVIDERS:
        raise ValueError(f"unknown provider {header.provider!r}")
    if header.key_version < 0:
        raise ValueError(f"negative key version {header.key_version}")
    if len(header.nonce_prefix) != NONCE_PREFIX_SIZE:
        raise ValueError("the nonce prefix is not 8 bytes")
    _check_chunk_size(header.chunk_size)


def _check_context(header: Header, expected: dict[str, str]) -> None:
    if dict(header.context) == expected:
        return
    names = sorted(
        k for k in {*header.context, *expected} if header.context.get(k) != expected.get(k)
    )
    raise ContextMismatchError(
        f"the blob was sealed under another encryption context (differs on {', '.join(names)})"
    )


def _seal_chunks(src: BinaryIO, dst: BinaryIO, aead: AESGCM, header: Header) -> tuple[int, int]:
    out = _buffer(header.chunk_size + TAG_SIZE)

    def seal(chunk: memoryview, index: int, final: bool) -> int:
        sealed = out[: len(chunk) + TAG_SIZE]
        nonce, aad = _nonce_and_aad(header, index, final)
        aead.encrypt_into(nonce, chunk, aad, sealed)
        dst.write(sealed)
        return len(chunk)

    return _each_chunk(src, header.chunk_size, seal)


def _open_chunks(src: BinaryIO, dst: BinaryIO, aead: AESGCM, header: Header) -> tuple[int, int]:
    out = _buffer(header.chunk_size)

    def open_one(chunk: memoryview, index: int, final: bool) -> int:
        if len(chunk) < TAG_SIZE:
            raise TamperedError(f"the blob is truncated at chunk {index}")
        plaintext = out[: len(chunk) - TAG_SIZE]
        nonce, aad = _nonce_and_aad(header, index, final)
        try:
            aead.decrypt_into(nonce, chunk, aad, plaintext)
        except InvalidTag:
            raise TamperedError(
                f"chunk {index} does not authenticate (altered, reordered, truncated or "
                "extended data, or an altered header)"
            ) from None
        dst.write(plaintext)
        return len(plaintext)

    return _each_chunk(src, header.chunk_size + TAG_SIZE, open_one)


def _each_chunk(
    src: BinaryIO, frame: int, step: Callable[[memoryview, int, bool], int]
) -> tuple[int, int]:
    """Feed ``src`` to ``step`` a frame at a time, reading one ahead so the last is flagged final.

    Every frame but the last is full. The two buffers are reused, as ``dst.write`` copies.
    Returns (chunks, bytes ``step`` reported).
    """
    current, following = _buffer(frame), _buffer(frame)
    filled, total = _fill(src, current), 0
    for index in range(MAX_CHUNKS):
        ahead = _fill(src, following) if filled == frame else 0
        total += step(current[:filled], index, ahead == 0)
        if ahead == 0:
            return index + 1, total
        current, following, filled = following, current, ahead
    raise KmsError(f"a blob holds at most {MAX_CHUNKS} chunks; use a larger chunk_size")


def _nonce_and_aad(header: Header, index: int, final: bool) -> tuple[bytes, bytes]:
    counter = _U32.pack(index)
    return header.nonce_prefix + counter, header.digest + counter + (b"\x01" if final else b"\x00")


def _buffer(size: int) -> memoryview:
    return memoryview(bytearray(size))


def _fill(src: BinaryIO, view: memoryview) -> int:
    """Fill ``view`` from ``src``; it stays short only at the end of the stream."""
    readinto = getattr(src, "readinto", None)
    filled = 0
    while filled < len(view):
        if readinto is not None:
            n = readinto(view[filled:])
        else:
            data = src.read(len(view) - filled)
            n = len(data)
            view[filled : filled + n] = data
        if not n:
            break
        filled += n
    return filled


def _read_full(src: BinaryIO, size: int) -> bytes:
    """``size`` bytes, or fewer only at the end of the stream."""
    buf = _buffer(size)
    return bytes(buf[: _fill(src, buf)])


@contextlib.contextmanager
def _atomic_output(path: PathLike) -> Iterator[BinaryIO]:
    """A temporary file next to ``path`` that replaces it only if the block completes."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)
