"""LWENC1 envelopes under local keys: round trips, the format itself, tampering, key states."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import json
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, cast

import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from controlplane.kms.envelope import (
    MAGIC,
    Header,
    is_sealed,
    open_bytes,
    open_file,
    open_stream,
    read_header,
    seal_bytes,
    seal_file,
    seal_stream,
)
from controlplane.kms.keyring import (
    AwsKmsProvider,
    ContextMismatchError,
    KeyDisabledError,
    KeyNotFoundError,
    KeyProvider,
    KeyRef,
    KeyState,
    KeyVersionMissingError,
    KmsError,
    LocalKeyProvider,
    MasterKey,
    TamperedError,
    new_local_key,
    provider_for,
    rotate_local_key,
)

ACCOUNT = "123456789012"
CONTEXT = {"tenant": "acct-1", "resource": "arn:loopwright:checkpoint::acct-1:ckpt/7"}
CHUNK = 64
TAG = 16


class Keyring:
    """Key records by ARN, as the database would hand them out."""

    def __init__(self, master: MasterKey) -> None:
        self.master = master
        self.keys: dict[str, KeyRef] = {}

    def add(self, key: KeyRef) -> KeyRef:
        self.keys[key.arn] = key
        return key

    def lookup(self, arn: str) -> KeyRef:
        if arn not in self.keys:
            raise KeyNotFoundError(f"no key {arn}")
        return self.keys[arn]

    def provider(self, key: KeyRef) -> KeyProvider:
        return provider_for(key, master=self.master, aws_client_factory=None)

    def opener(self, context: dict[str, str] | None = None) -> dict:
        return {
            "key_lookup": self.lookup,
            "provider_for_key": self.provider,
            "expected_context": CONTEXT if context is None else context,
        }


@pytest.fixture
def master() -> MasterKey:
    return MasterKey("server secret for tests")


@pytest.fixture
def ring(master: MasterKey) -> Keyring:
    return Keyring(master)


@pytest.fixture
def key(ring: Keyring, master: MasterKey) -> KeyRef:
    return ring.add(new_local_key(ACCOUNT, master))


def seal(ring: Keyring, key: KeyRef, data: bytes, chunk_size: int = CHUNK) -> bytes:
    return seal_bytes(
        data, key=key, provider=ring.provider(key), context=CONTEXT, chunk_size=chunk_size
    )


def set_state(ring: Keyring, key: KeyRef, state: KeyState) -> KeyRef:
    return ring.add(dataclasses.replace(key, state=state))


# --- round trips ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "chunks"),
    [(0, 1), (1, 1), (CHUNK - 1, 1), (CHUNK, 1), (CHUNK + 1, 2), (2 * CHUNK, 2), (1000, 16)],
)
def test_bytes_round_trip(ring: Keyring, key: KeyRef, size: int, chunks: int) -> None:
    data = os.urandom(size)
    out = io.BytesIO()
    info = seal_stream(
        io.BytesIO(data),
        out,
        key=key,
        provider=ring.provider(key),
        context=CONTEXT,
        chunk_size=CHUNK,
    )
    blob = out.getvalue()
    assert (info.chunks, info.plaintext_size, info.sealed_size) == (chunks, size, len(blob))
    assert len(blob) == len(info.header.raw) + size + chunks * TAG
    assert open_bytes(blob, **ring.opener()) == data


def test_default_chunk_size_round_trip(ring: Keyring, key: KeyRef) -> None:
    data = os.urandom(3 * (1 << 20) + 5)
    blob = seal_bytes(data, key=key, provider=ring.provider(key), context=CONTEXT)
    assert read_header(blob).chunk_size == 1 << 20
    assert open_bytes(blob, **ring.opener()) == data


class Dribble(io.RawIOBase):
    """A source that hands out a few bytes per read, as a pipe or socket may."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        chunk = self._data.read(min(len(buffer), 7))
        buffer[: len(chunk)] = chunk
        return len(chunk)


def test_stream_round_trip_with_short_reads(ring: Keyring, key: KeyRef) -> None:
    data = os.urandom(10 * CHUNK + 3)
    sealed = io.BytesIO()
    seal_stream(
        cast(BinaryIO, Dribble(data)),
        sealed,
        key=key,
        provider=ring.provider(key),
        context=CONTEXT,
        chunk_size=CHUNK,
    )
    out = io.BytesIO()
    info = open_stream(cast(BinaryIO, Dribble(sealed.getvalue())), out, **ring.opener())
    assert out.getvalue() == data
    assert (info.chunks, info.plaintext_size) == (11, len(data))


def test_file_round_trip(ring: Keyring, key: KeyRef, tmp_path: Path) -> None:
    marker = b"adapter_model.safetensors plaintext marker "
    data = marker * 500
    plain, sealed, opened = tmp_path / "w.bin", tmp_path / "w.bin.lwenc", tmp_path / "back.bin"
    plain.write_bytes(data)
    info = seal_file(
        plain, sealed, key=key, provider=ring.provider(key), context=CONTEXT, chunk_size=CHUNK
    )
    blob = sealed.read_bytes()
    assert len(blob) == info.sealed_size and marker not in blob
    assert is_sealed(sealed) and is_sealed(blob) and not is_sealed(plain)
    assert open_file(sealed, opened, **ring.opener()).plaintext_size == len(data)
    assert opened.read_bytes() == data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["back.bin", "w.bin", "w.bin.lwenc"]


def test_seal_file_in_place(ring: Keyring, key: KeyRef, tmp_path: Path) -> None:
    path = tmp_path / "optimizer.pt"
    data = os.urandom(5 * CHUNK)
    path.write_bytes(data)
    seal_file(path, path, key=key, provider=ring.provider(key), context=CONTEXT, chunk_size=CHUNK)
    assert is_sealed(path)
    open_file(path, path, **ring.opener())
    assert path.read_bytes() == data


def test_read_header_without_decrypting(ring: Keyring, key: KeyRef, tmp_path: Path) -> None:
    blob = seal(ring, key, b"x" * 100)
    (tmp_path / "b").write_bytes(blob)
    for source in (blob, io.BytesIO(blob), tmp_path / "b", str(tmp_path / "b")):
        header = read_header(source)
        assert (header.key_arn, header.provider, header.key_version) == (key.arn, "local", 1)
        assert (dict(header.context), header.chunk_size) == (CONTEXT, CHUNK)
    assert key.arn in repr(header) and header.wrapped_key.hex() not in repr(header)


def test_is_sealed_on_other_data(tmp_path: Path) -> None:
    (tmp_path / "short").write_bytes(b"LW")
    (tmp_path / "empty").write_bytes(b"")
    assert not is_sealed(tmp_path / "short") and not is_sealed(tmp_path / "empty")
    assert not is_sealed(b"PK\x03\x04") and is_sealed(bytearray(MAGIC + b"rest"))
    with pytest.raises(TamperedError, match="magic"):
        read_header(b"{}")


# --- the format, checked by hand ----------------------------------------------------------


def test_format_decrypts_by_hand(ring: Keyring, key: KeyRef) -> None:
    data = os.urandom(3 * CHUNK + 10)
    blob = seal(ring, key, data)
    assert blob.startswith(b"LWENC1\n")
    (length,) = struct.unpack(">I", blob[7:11])
    body = blob[11 : 11 + length]
    doc = json.loads(body)
    assert body == json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    assert doc["format"] == 1 and doc["context"] == CONTEXT and doc["chunk_size"] == CHUNK
    prefix, wrapped = base64.b64decode(doc["nonce_prefix"]), base64.b64decode(doc["wrapped_key"])
    data_key = LocalKeyProvider(ring.master).decrypt_data_key(key, wrapped, 1, CONTEXT)
    aead, digest = AESGCM(data_key), hashlib.sha256(blob[: 11 + length]).digest()
    frames = blob[11 + length :]
    frame = CHUNK + TAG
    pieces = [frames[i : i + frame] for i in range(0, len(frames), frame)]
    assert len(pieces) == 4 and len(pieces[-1]) == 10 + TAG
    out = b""
    for index, piece in enumerate(pieces):
        nonce = prefix + index.to_bytes(4, "big")
        final = bytes([index == len(pieces) - 1])
        out += aead.decrypt(nonce, piece, digest + index.to_bytes(4, "big") + final)
    assert out == data
    with pytest.raises(InvalidTag):  # the final flag is part of the associated data
        aead.decrypt(prefix + (3).to_bytes(4, "big"), pieces[3], digest + b"\0\0\0\3\0")


def test_fresh_data_key_per_object(ring: Keyring, key: KeyRef) -> None:
    data = b"same checkpoint bytes" * 10
    one, two = seal(ring, key, data), seal(ring, key, data)
    assert one != two
    h1, h2 = read_header(one), read_header(two)
    assert h1.nonce_prefix != h2.nonce_prefix and h1.wrapped_key != h2.wrapped_key
    provider = LocalKeyProvider(ring.master)
    k1 = provider.decrypt_data_key(key, h1.wrapped_key, 1, CONTEXT)
    k2 = provider.decrypt_data_key(key, h2.wrapped_key, 1, CONTEXT)
    assert len(k1) == len(k2) == 32 and k1 != k2
    assert open_bytes(one, **ring.opener()) == open_bytes(two, **ring.opener()) == data


# --- tampering -----------------------------------------------------------------------------

DATA = bytes(range(256)) * 2  # 512 bytes: 8 full chunks of 64


def layout(blob: bytes) -> tuple[int, list[bytes]]:
    start = len(read_header(blob).raw)
    rest = blob[start:]
    return start, [rest[i : i + CHUNK + TAG] for i in range(0, len(rest), CHUNK + TAG)]


def flip(blob: bytes, at: int, bit: int = 0) -> bytes:
    out = bytearray(blob)
    out[at] ^= 1 << bit
    return bytes(out)


def with_header(blob: bytes, **changes: object) -> bytes:
    """The blob behind a well-formed header with some fields changed."""
    header = read_header(blob)
    return dataclasses.replace(header, **changes).raw + blob[len(header.raw) :]  # type: ignore[arg-type]


def with_json(blob: bytes, encode: Callable[[dict], bytes]) -> bytes:
    """The blob behind a header re-encoded by ``encode`` (with a correct length)."""
    raw = read_header(blob).raw
    body = encode(json.loads(raw[11:]))
    return MAGIC + struct.pack(">I", len(body)) + body + blob[len(raw) :]


def _canonical(doc: dict) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def rechunk(blob: bytes, order: Callable[[list[bytes]], list[bytes]]) -> bytes:
    start, chunks = layout(blob)
    return blob[:start] + b"".join(order(chunks))


def _flip_key_bit(blob: bytes) -> bytes:
    wrapped = bytearray(read_header(blob).wrapped_key)
    wrapped[20] ^= 0x04
    return with_header(blob, wrapped_key=bytes(wrapped))


TAMPERS: dict[str, Callable[[bytes], bytes]] = {
    "magic bit": lambda b: flip(b, 2),
    "header length": lambda b: flip(b, 10),
    "header JSON brace": lambda b: flip(b, 11, 1),
    "header nonce prefix": lambda b: with_header(b, nonce_prefix=b"\0" * 8),
    "header chunk size": lambda b: with_header(b, chunk_size=CHUNK * 2),
    "wrapped key bit": _flip_key_bit,
    "wrapped key truncated": lambda b: with_header(b, wrapped_key=read_header(b).wrapped_key[:-1]),
    "header with spaces": lambda b: with_json(b, lambda doc: json.dumps(doc).encode()),
    "header with extra field": lambda b: with_json(b, lambda doc: _canonical({**doc, "x": 1})),
    "header without format": lambda b: with_json(
        b, lambda doc: _canonical({**doc, "format": None})
    ),
    "chunk 0 ciphertext": lambda b: flip(b, layout(b)[0] + 5),
    "chunk 3 ciphertext": lambda b: flip(b, layout(b)[0] + 3 * (CHUNK + TAG) + 40, 7),
    "last chunk tag": lambda b: flip(b, len(b) - 1),
    "truncate to header": lambda b: b[: layout(b)[0]],
    "truncate at boundary": lambda b: b[: layout(b)[0] + 3 * (CHUNK + TAG)],
    "drop final chunk": lambda b: rechunk(b, lambda c: c[:-1]),
    "truncate mid chunk": lambda b: b[:-7],
    "truncate in header": lambda b: b[: layout(b)[0] - 5],
    "swap chunks": lambda b: rechunk(b, lambda c: [c[1], c[0], *c[2:]]),
    "final chunk moved first": lambda b: rechunk(b, lambda c: [c[-1], *c[:-1]]),
    "append copy of a chunk": lambda b: rechunk(b, lambda c: [*c, c[2]]),
    "append one byte": lambda b: b + b"\0",
    "duplicate final chunk": lambda b: rechunk(b, lambda c: [*c, c[-1]]),
}


@pytest.fixture
def sealed_file(ring: Keyring, key: KeyRef, tmp_path: Path) -> Path:
    path = tmp_path / "in.lwenc"
    path.write_bytes(seal(ring, key, DATA))
    return path


@pytest.mark.parametrize("name", TAMPERS)
def test_tampering_fails_and_leaves_no_output(
    ring: Keyring, sealed_file: Path, tmp_path: Path, name: str
) -> None:
    sealed_file.write_bytes(TAMPERS[name](sealed_file.read_bytes()))
    with pytest.raises(TamperedError):
        open_file(sealed_file, tmp_path / "out.bin", **ring.opener())
    assert [p.name for p in tmp_path.iterdir()] == ["in.lwenc"]


def test_untampered_fixture_opens(ring: Keyring, sealed_file: Path, tmp_path: Path) -> None:
    open_file(sealed_file, tmp_path / "out.bin", **ring.opener())
    assert (tmp_path / "out.bin").read_bytes() == DATA


def test_failed_open_keeps_previous_output(
    ring: Keyring, sealed_file: Path, tmp_path: Path
) -> None:
    target = tmp_path / "out.bin"
    target.write_bytes(b"previous")
    sealed_file.write_bytes(sealed_file.read_bytes()[:-1])
    with pytest.raises(TamperedError):
        open_file(sealed_file, target, **ring.opener())
    assert target.read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.lwenc", "out.bin"]


def test_every_chunk_detects_a_flipped_bit(ring: Keyring, key: KeyRef) -> None:
    blob = seal(ring, key, DATA[:-10])  # 7 full chunks and a short final one
    start, chunks = layout(blob)
    assert len(chunks) == 8
    for index, chunk in enumerate(chunks):
        for offset in (0, len(chunk) // 2, len(chunk) - TAG, len(chunk) - 1):
            at = start + index * (CHUNK + TAG) + offset
            with pytest.raises(TamperedError, match=f"chunk {index} does not authenticate"):
                open_bytes(flip(blob, at, offset % 8), **ring.opener())


def test_every_header_bit_flip_fails_closed(ring: Keyring, key: KeyRef) -> None:
    blob = seal(ring, key, DATA[:100])
    header = read_header(blob)
    raw = header.raw
    # Flips inside these values name another key or version: the lookup fails before any crypto.
    spans = [_value_span(raw, key.arn.encode()), _value_span(raw, b'"key_version":1')]
    for at in range(len(raw)):
        for bit in range(8):
            with pytest.raises(KmsError) as caught:
                open_bytes(flip(blob, at, bit), **ring.opener())
            if not any(lo <= at < hi for lo, hi in spans):
                assert isinstance(caught.value, TamperedError), (at, bit, caught.value)


def _value_span(raw: bytes, value: bytes) -> tuple[int, int]:
    start = raw.index(value)
    return start, start + len(value)


@pytest.mark.parametrize(
    "expected",
    [
        {**CONTEXT, "tenant": "acct-2"},
        {"tenant": CONTEXT["tenant"]},
        {**CONTEXT, "extra": "x"},
        {},
    ],
)
def test_context_mismatch(
    ring: Keyring, key: KeyRef, expected: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "in"
    path.write_bytes(seal(ring, key, DATA))
    with pytest.raises(ContextMismatchError, match="another encryption context"):
        open_file(path, tmp_path / "out", **ring.opener(expected))
    assert not (tmp_path / "out").exists()


def test_context_edited_in_header(ring: Keyring, key: KeyRef) -> None:
    other = {**CONTEXT, "tenant": "acct-2"}
    forged = with_header(seal(ring, key, DATA), context=other)
    with pytest.raises(TamperedError, match="data key"):
        open_bytes(forged, **ring.opener(other))


def test_context_must_be_strings(ring: Keyring, key: KeyRef) -> None:
    with pytest.raises(TypeError):
        seal_bytes(b"x", key=key, provider=ring.provider(key), context={"step": 3})  # type: ignore[dict-item]


def test_another_tenants_key_cannot_open(ring: Keyring, key: KeyRef, master: MasterKey) -> None:
    other = ring.add(new_local_key("210987654321", master))
    blob = seal(ring, key, DATA)
    forged = with_header(blob, key_arn=other.arn)
    with pytest.raises(TamperedError):
        open_bytes(forged, **ring.opener())


def test_lookup_must_return_the_named_key(ring: Keyring, key: KeyRef, master: MasterKey) -> None:
    other = new_local_key(ACCOUNT, master)
    blob = seal(ring, key, DATA)
    with pytest.raises(KmsError, match="another key"):
        open_bytes(blob, **{**ring.opener(), "key_lookup": lambda arn: other})
    aws = KeyRef(arn=key.arn, provider="aws", aws_key_id="k")
    with pytest.raises(TamperedError, match="provider"):
        open_bytes(blob, **{**ring.opener(), "key_lookup": lambda arn: aws})


def test_unknown_key(ring: Keyring, key: KeyRef) -> None:
    blob = seal(ring, key, DATA)
    del ring.keys[key.arn]
    with pytest.raises(KeyNotFoundError):
        open_bytes(blob, **ring.opener())


# --- key states, rotation, master key ------------------------------------------------------


@pytest.mark.parametrize("state", ["Disabled", "PendingDeletion"])
def test_unusable_key_refuses_seal_and_open(
    ring: Keyring, key: KeyRef, state: KeyState, tmp_path: Path
) -> None:
    blob = seal(ring, key, DATA)
    off = set_state(ring, key, state)
    (tmp_path / "plain").write_bytes(DATA)
    with pytest.raises(KeyDisabledError, match=f"{off.arn} is {state}") as caught:
        seal_file(
            tmp_path / "plain",
            tmp_path / "s",
            key=off,
            provider=ring.provider(off),
            context=CONTEXT,
        )
    assert (caught.value.key_arn, caught.value.state) == (off.arn, state)
    with pytest.raises(KeyDisabledError, match=f"{off.arn} is {state}"):
        open_bytes(blob, **ring.opener())
    provider = LocalKeyProvider(ring.master)
    with pytest.raises(KeyDisabledError):
        provider.generate_data_key(off, CONTEXT)
    with pytest.raises(KeyDisabledError):
        provider.decrypt_data_key(off, read_header(blob).wrapped_key, 1, CONTEXT)
    assert [p.name for p in tmp_path.iterdir()] == ["plain"]
    set_state(ring, key, "Enabled")
    assert open_bytes(blob, **ring.opener()) == DATA


def test_rotation_keeps_old_versions(ring: Keyring, key: KeyRef, master: MasterKey) -> None:
    old_blob = seal(ring, key, DATA)
    rotated = ring.add(rotate_local_key(key, master))
    assert (rotated.current_version, sorted(rotated.versions)) == (2, [1, 2])
    assert open_bytes(old_blob, **ring.opener()) == DATA
    new_blob = seal(ring, rotated, DATA)
    assert (read_header(old_blob).key_version, read_header(new_blob).key_version) == (1, 2)
    assert open_bytes(new_blob, **ring.opener()) == DATA
    ring.add(key)  # a record that never saw version 2
    with pytest.raises(KeyVersionMissingError, match="no version 2"):
        open_bytes(new_blob, **ring.opener())


def test_current_version_without_material(ring: Keyring, key: KeyRef) -> None:
    broken = dataclasses.replace(key, current_version=5)
    with pytest.raises(KeyVersionMissingError, match="no version 5"):
        seal(ring, broken, DATA)


def test_wrong_master_key_fails_closed(ring: Keyring, key: KeyRef, tmp_path: Path) -> None:
    path = tmp_path / "in"
    path.write_bytes(seal(ring, key, DATA))
    stranger = Keyring(MasterKey("another server's secret"))
    stranger.add(key)
    with pytest.raises(TamperedError, match="master key"):
        open_file(path, tmp_path / "out", **stranger.opener())
    with pytest.raises(TamperedError, match="master key"):
        seal(stranger, key, DATA)
    assert [p.name for p in tmp_path.iterdir()] == ["in"]


def test_key_material_is_bound_to_arn_and_version(master: MasterKey) -> None:
    material = os.urandom(32)
    wrapped = master.wrap_material(material, key_arn="arn:a", version=1)
    assert master.unwrap_material(wrapped, key_arn="arn:a", version=1) == material
    for arn, version in (("arn:b", 1), ("arn:a", 2)):
        with pytest.raises(TamperedError):
            master.unwrap_material(wrapped, key_arn=arn, version=version)
    with pytest.raises(ValueError):
        master.wrap_material(b"short", key_arn="arn:a", version=1)


def test_master_key_is_not_shown_and_not_empty() -> None:
    assert "secret" not in repr(MasterKey("secret"))
    with pytest.raises(ValueError):
        MasterKey("")


def test_key_ref_validation() -> None:
    with pytest.raises(ValueError, match="aws_key_id"):
        KeyRef(arn="arn:x", provider="aws")
    with pytest.raises(ValueError, match="state"):
        KeyRef(arn="arn:x", provider="local", state="Gone")  # type: ignore[arg-type]
    versions = {1: b"w"}
    ref = KeyRef(arn="arn:x", provider="local", versions=versions)
    versions[2] = b"later"
    assert list(ref.versions) == [1]


def test_provider_for(master: MasterKey) -> None:
    local = KeyRef(arn="arn:l", provider="local")
    aws = KeyRef(arn="arn:a", provider="aws", aws_key_id="k")
    assert isinstance(provider_for(local, master=master, aws_client_factory=None), LocalKeyProvider)
    assert isinstance(provider_for(aws, master=master, aws_client_factory=object), AwsKmsProvider)
    with pytest.raises(KmsError, match="no AWS KMS client"):
        provider_for(aws, master=master, aws_client_factory=None)


def test_header_is_immutable_value(ring: Keyring, key: KeyRef) -> None:
    header = read_header(seal(ring, key, b""))
    assert isinstance(header, Header)
    with pytest.raises(dataclasses.FrozenInstanceError):
        header.key_arn = "arn:other"  # type: ignore[misc]
