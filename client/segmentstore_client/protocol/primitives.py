"""Primitive wire encodings of Pravega's WireCommands: compiled structs and Java strings.

Integers are big-endian; UUIDs are 16 bytes (msb then lsb); strings are Java's
``writeUTF``: an unsigned 16-bit byte count and *modified* UTF-8 (NUL as C0 80,
supplementary characters as two 3-byte surrogate halves). Decoding is lenient the way the
reference recommends: it also takes a raw 00 byte and standard 4-byte UTF-8 (what the Rust
client sends). ASCII strings (every segment name) take a fast path in both directions.
"""

from __future__ import annotations

import struct
import uuid
from typing import Final

from ..errors import LocalProtocolError, MalformedCommand

HEADER: Final = struct.Struct(">ii")
U16: Final = struct.Struct(">H")
I32: Final = struct.Struct(">i")
I64: Final = struct.Struct(">q")
EVENT_HEADER: Final = HEADER  # an Event record is (type 0, length) + payload

Buffer = bytes | bytearray | memoryview

_UUID_CACHE: dict[bytes, uuid.UUID] = {}
_UUID_CACHE_MAX: Final = 4096


def uuid_from_bytes(raw: bytes) -> uuid.UUID:
    """A UUID from its 16 wire bytes; writer ids repeat, so recent ones are cached."""
    u = _UUID_CACHE.get(raw)
    if u is None:
        if len(_UUID_CACHE) >= _UUID_CACHE_MAX:
            _UUID_CACHE.clear()
        u = _UUID_CACHE[raw] = uuid.UUID(bytes=raw)
    return u


_STR_CACHE: dict[str, bytes] = {}
_STR_CACHE_MAX: Final = 4096


def encode_str(s: str) -> bytes:
    """Encode ``s`` as Java ``writeUTF`` does: u16 byte count + modified UTF-8."""
    enc = _STR_CACHE.get(s)
    if enc is not None:
        return enc
    ascii_only = s.isascii() and "\x00" not in s
    body = s.encode("ascii") if ascii_only else _encode_modified_utf8(s)
    if len(body) > 0xFFFF:
        raise LocalProtocolError(f"string encodes to {len(body)} bytes; the limit is 65535")
    enc = U16.pack(len(body)) + body
    if len(s) <= 256:
        if len(_STR_CACHE) >= _STR_CACHE_MAX:
            _STR_CACHE.clear()
        _STR_CACHE[s] = enc
    return enc


def _encode_modified_utf8(s: str) -> bytes:
    units = s.encode("utf-16-be", "surrogatepass")
    out = bytearray()
    for i in range(0, len(units), 2):
        c = (units[i] << 8) | units[i + 1]
        if 0 < c < 0x80:
            out.append(c)
        elif c < 0x800:
            out += bytes((0xC0 | (c >> 6), 0x80 | (c & 0x3F)))
        else:
            out += bytes((0xE0 | (c >> 12), 0x80 | ((c >> 6) & 0x3F), 0x80 | (c & 0x3F)))
    return bytes(out)


def decode_str_body(raw: bytes) -> str:
    """Decode the body of a ``writeUTF`` string (after its length prefix)."""
    if raw.isascii():
        return raw.decode("ascii")
    units = bytearray()
    i, n = 0, len(raw)
    while i < n:
        b = raw[i]
        if b < 0x80:
            units += bytes((0, b))
            i += 1
        elif b & 0xE0 == 0xC0:
            if i + 1 >= n or raw[i + 1] & 0xC0 != 0x80:
                raise MalformedCommand("malformed modified UTF-8 (2-byte sequence)")
            c = ((b & 0x1F) << 6) | (raw[i + 1] & 0x3F)
            units += c.to_bytes(2, "big")
            i += 2
        elif b & 0xF0 == 0xE0:
            if i + 2 >= n or raw[i + 1] & 0xC0 != 0x80 or raw[i + 2] & 0xC0 != 0x80:
                raise MalformedCommand("malformed modified UTF-8 (3-byte sequence)")
            c = ((b & 0x0F) << 12) | ((raw[i + 1] & 0x3F) << 6) | (raw[i + 2] & 0x3F)
            units += c.to_bytes(2, "big")
            i += 3
        elif b & 0xF8 == 0xF0:
            # Standard UTF-8 for a supplementary character (the Rust client sends these).
            if i + 3 >= n or any(raw[i + k] & 0xC0 != 0x80 for k in (1, 2, 3)):
                raise MalformedCommand("malformed UTF-8 (4-byte sequence)")
            cp = (
                ((b & 0x07) << 18)
                | ((raw[i + 1] & 0x3F) << 12)
                | ((raw[i + 2] & 0x3F) << 6)
                | (raw[i + 3] & 0x3F)
            )
            if not 0x10000 <= cp <= 0x10FFFF:
                raise MalformedCommand("malformed UTF-8 (code point out of range)")
            cp -= 0x10000
            units += (0xD800 | (cp >> 10)).to_bytes(2, "big")
            units += (0xDC00 | (cp & 0x3FF)).to_bytes(2, "big")
            i += 4
        else:
            raise MalformedCommand(f"malformed modified UTF-8 (lead byte {b:#04x})")
    return units.decode("utf-16-be", "surrogatepass")
