"""Kafka 0.10's compression codecs: gzip, snappy (xerial framing) and lz4 (frame format).

Contract: ``compress(codec, data, magic)`` / ``decompress(codec, data, magic, limit)``
return bytes. Decompression never produces more than ``limit`` bytes (a decompression
bomb is :class:`InvalidLayout`), damaged input is :class:`InvalidLayout`, and a codec
whose package is missing is :class:`CodecUnavailable` naming the package to install.

Facts carried over from Kafka and kafka-python:

- gzip: one RFC 1952 member (we write mtime 0 so output is reproducible; we read
  concatenated members, as Java's GZIPInputStream does).
- snappy: the xerial block stream: a 16-byte header (0x82 "SNAPPY" 0x00, version 1,
  compatible 1 as big-endian int32) then blocks of (int32 length, raw snappy block) each
  holding at most 32 KiB of input. Unframed raw snappy is accepted when reading.
- lz4: the LZ4 frame format with independent blocks. Magic 0 messages carry Kafka's
  broken frame header checksum (KAFKA-1493: the xxHash32 is taken over the 4 magic bytes
  plus the descriptor instead of the descriptor alone, and the content-size field is not
  used); magic 1 messages carry a correct frame.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any, Final

from .errors import CodecUnavailable, InvalidLayout

NONE: Final = 0
GZIP: Final = 1
SNAPPY: Final = 2
LZ4: Final = 3
NAMES: Final = ("none", "gzip", "snappy", "lz4")

_XERIAL_HEADER: Final = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK: Final = 32 * 1024
_I32: Final = struct.Struct(">i")
_LZ4_MAGIC: Final = b"\x04\x22\x4d\x18"


def _snappy() -> Any:
    try:
        import snappy
    except ImportError:
        raise CodecUnavailable(
            "Kafka's snappy codec needs the 'python-snappy' package "
            "(pip install 'segmentstore[formats]' or pip install python-snappy)"
        ) from None
    return snappy


def _lz4() -> Any:
    try:
        import lz4.frame
    except ImportError:
        raise CodecUnavailable(
            "Kafka's lz4 codec needs the 'lz4' package "
            "(pip install 'segmentstore[formats]' or pip install lz4)"
        ) from None
    return lz4.frame


def available(codec: int) -> bool:
    """True if ``codec`` (0-3) can be used here."""
    try:
        if codec == SNAPPY:
            _snappy()
        elif codec == LZ4:
            _lz4()
    except CodecUnavailable:
        return False
    return 0 <= codec <= 3


def compress(codec: int, data: bytes, magic: int, level: int | None = None) -> bytes:
    if codec == GZIP:
        c = zlib.compressobj(6 if level is None else level, zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()
    if codec == SNAPPY:
        snappy = _snappy()
        parts = [_XERIAL_HEADER]
        for i in range(0, len(data), _XERIAL_BLOCK):
            block = snappy.compress(data[i : i + _XERIAL_BLOCK])
            parts.append(_I32.pack(len(block)))
            parts.append(block)
        return b"".join(parts)
    if codec == LZ4:
        lz4 = _lz4()
        if magic == 0:
            frame = bytes(lz4.compress(data, block_linked=False, store_size=False))
            return frame[:6] + bytes([(xxh32(frame[:6]) >> 8) & 0xFF]) + frame[7:]
        return bytes(lz4.compress(data, block_linked=False))
    raise ValueError(f"not a compression codec: {codec}")


def decompress(codec: int, data: bytes, magic: int, limit: int) -> bytes:
    try:
        if codec == GZIP:
            return _gunzip(data, limit)
        if codec == SNAPPY:
            return _unsnappy(data, limit)
        if codec == LZ4:
            return _unlz4(data, magic, limit)
    except (InvalidLayout, CodecUnavailable):
        raise
    except Exception as e:  # each library has its own error classes for damaged input
        raise InvalidLayout(f"{NAMES[codec]} data does not decompress: {e}") from None
    raise InvalidLayout(f"unknown compression codec {codec}")


def _too_big(limit: int) -> InvalidLayout:
    return InvalidLayout(f"compressed message set expands beyond {limit} bytes")


def _gunzip(data: bytes, limit: int) -> bytes:
    out: list[bytes] = []
    size = 0
    rest = data
    while True:
        d = zlib.decompressobj(31)
        chunk = d.decompress(rest, limit - size + 1)
        size += len(chunk)
        out.append(chunk)
        if size > limit or d.unconsumed_tail:
            raise _too_big(limit)
        if not d.eof:
            raise InvalidLayout("gzip data ends inside a member")
        rest = d.unused_data
        if not rest:
            return b"".join(out)


def _unsnappy(data: bytes, limit: int) -> bytes:
    snappy = _snappy()
    if not data.startswith(_XERIAL_HEADER[:8]) or len(data) < 16:
        if _snappy_length(data) > limit:
            raise _too_big(limit)
        return bytes(snappy.decompress(data))
    out: list[bytes] = []
    size = 0
    pos = 16
    while pos < len(data):
        if pos + 4 > len(data):
            raise InvalidLayout("snappy block length cut short")
        (n,) = _I32.unpack_from(data, pos)
        pos += 4
        if n < 0 or pos + n > len(data):
            raise InvalidLayout(f"snappy block of {n} bytes overruns the data")
        block = data[pos : pos + n]
        pos += n
        size += _snappy_length(block)
        if size > limit:
            raise _too_big(limit)
        out.append(bytes(snappy.decompress(block)))
    return b"".join(out)


def _snappy_length(block: bytes) -> int:
    """The uncompressed length a raw snappy block declares (its leading varint)."""
    n = shift = 0
    for i in range(min(len(block), 5)):
        b = block[i]
        n |= (b & 0x7F) << shift
        if not b & 0x80:
            return n
        shift += 7
    raise InvalidLayout("snappy block has no valid length")


def _unlz4(data: bytes, magic: int, limit: int) -> bytes:
    lz4 = _lz4()
    if magic == 0 and len(data) >= 7 and data[:4] == _LZ4_MAGIC:
        # Repair Kafka's broken header checksum, then read a normal frame.
        end = 7 + (8 if data[4] & 0x08 else 0)
        if len(data) < end:
            raise InvalidLayout("lz4 frame header cut short")
        if data[end - 1] != (xxh32(data[: end - 1]) >> 8) & 0xFF:
            raise InvalidLayout("lz4 frame header checksum mismatch")
        hc = (xxh32(data[4 : end - 1]) >> 8) & 0xFF
        data = data[: end - 1] + bytes([hc]) + data[end:]
    d = lz4.LZ4FrameDecompressor()
    out = bytes(d.decompress(data, max_length=limit + 1))
    if len(out) > limit:
        raise _too_big(limit)
    if not d.eof:
        raise InvalidLayout("lz4 frame ends early")
    if d.unused_data:
        raise InvalidLayout("bytes after the end of the lz4 frame")
    return out


_P1: Final = 2654435761
_P2: Final = 2246822519
_P3: Final = 3266489917
_P4: Final = 668265263
_P5: Final = 374761393
_M: Final = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M


def xxh32(data: bytes, seed: int = 0) -> int:
    """xxHash32 of ``data`` (the LZ4 frame header checksum; short inputs only)."""
    n = len(data)
    pos = 0
    if n >= 16:
        v = [(seed + _P1 + _P2) & _M, (seed + _P2) & _M, seed & _M, (seed - _P1) & _M]
        while pos + 16 <= n:
            for i in range(4):
                (w,) = struct.unpack_from("<I", data, pos)
                v[i] = (_rotl((v[i] + w * _P2) & _M, 13) * _P1) & _M
                pos += 4
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while pos + 4 <= n:
        (w,) = struct.unpack_from("<I", data, pos)
        h = (_rotl((h + w * _P3) & _M, 17) * _P4) & _M
        pos += 4
    while pos < n:
        h = (_rotl((h + data[pos] * _P5) & _M, 11) * _P1) & _M
        pos += 1
    h ^= h >> 15
    h = (h * _P2) & _M
    h ^= h >> 13
    h = (h * _P3) & _M
    h ^= h >> 16
    return h
