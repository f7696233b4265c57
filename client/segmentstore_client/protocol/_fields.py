"""Readers and writers for the composite field kinds of ``_compile`` (strings, byte
arrays, lists and the nested table structures).

A reader takes ``(mv, p, view)``: the payload as a memoryview, the position, and whether
byte fields may be zero-copy views of ``mv`` (true when the payload sits in a buffer owned
by this one frame); it returns ``(value, new_position)``. Running past the payload raises
``struct.error`` or :class:`MalformedCommand`; the frame decoder turns both into a
:class:`MalformedCommand`.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final

from ..errors import MalformedCommand
from .primitives import I32, I64, U16, Buffer, decode_str_body, encode_str, uuid_from_bytes
from .structures import (
    NO_VERSION,
    ChunkInfo,
    ConditionalAttributeUpdate,
    TableEntry,
    TableIteratorArgs,
    TableKey,
)

__all__ = ["encode_str", "uuid_from_bytes"]

_II: Final = struct.Struct(">ii")
_CAU: Final = struct.Struct(">16sbqq")
_CHUNK_HEAD: Final = struct.Struct(">qqq")
_EMPTY_KEY: Final = b"\x00\x00\x00\x0c\x00\x00\x00\x00"
_EMPTY_VALUE: Final = b"\x00\x00\x00\x04\x00\x00\x00\x00"

_STR_DEC_CACHE: dict[bytes, str] = {}


def span_error(n: int, what: str) -> MalformedCommand:
    return MalformedCommand(f"{what} of {n} bytes runs past the end of the frame")


def _span(mv: memoryview, p: int, n: int, what: str) -> int:
    e = p + n
    if n < 0 or e > len(mv):
        raise span_error(n, what)
    return e


def read_str(mv: memoryview, p: int, view: bool = False) -> tuple[str, int]:
    (n,) = U16.unpack_from(mv, p)
    p += 2
    e = _span(mv, p, n, "string")
    raw = bytes(mv[p:e])
    s = _STR_DEC_CACHE.get(raw)
    if s is None:
        s = decode_str_body(raw)
        if n <= 256:
            if len(_STR_DEC_CACHE) >= 4096:
                _STR_DEC_CACHE.clear()
            _STR_DEC_CACHE[raw] = s
    return s, e


def read_bytes(mv: memoryview, p: int, view: bool) -> tuple[Buffer, int]:
    (n,) = I32.unpack_from(mv, p)
    p += 4
    e = _span(mv, p, n, "byte array")
    return (mv[p:e] if view else bytes(mv[p:e])), e


def _count(mv: memoryview, p: int, min_item: int) -> tuple[int, int]:
    (n,) = I32.unpack_from(mv, p)
    p += 4
    if n < 0 or n * min_item > len(mv) - p:
        raise MalformedCommand(f"list of {n} items does not fit in the frame")
    return n, p


def read_longs(mv: memoryview, p: int, view: bool) -> tuple[tuple[int, ...], int]:
    n, p = _count(mv, p, 8)
    return struct.unpack_from(f">{n}q", mv, p), p + 8 * n


def write_longs(values: Sequence[int]) -> bytes:
    return struct.pack(f">i{len(values)}q", len(values), *values)


def read_strs(mv: memoryview, p: int, view: bool) -> tuple[tuple[str, ...], int]:
    n, p = _count(mv, p, 2)
    out = []
    for _ in range(n):
        s, p = read_str(mv, p)
        out.append(s)
    return tuple(out), p


def write_strs(values: Sequence[str]) -> bytes:
    return I32.pack(len(values)) + b"".join(encode_str(s) for s in values)


def _read_key(mv: memoryview, p: int, view: bool) -> tuple[Buffer, int, int]:
    size, n = _II.unpack_from(mv, p)
    # An empty key is 00 00 00 0c 00 00 00 00: its size claims 12 bytes, only 4 follow.
    # Java checks that claim anyway and so rejects an empty key in the frame's last 12
    # bytes; we skip it for empty keys, so that every frame we encode also decodes.
    if size < 0 or (n != 0 and size > len(mv) - p - 4):
        raise MalformedCommand(f"table key declares {size} bytes; fewer remain")
    p += 8
    if n == 0:
        return b"", NO_VERSION, p
    e = _span(mv, p, n, "table key")
    key = mv[p:e] if view else bytes(mv[p:e])
    (version,) = I64.unpack_from(mv, e)
    return key, version, e + 8


def _write_key(key: Buffer, version: int) -> bytes:
    n = len(key)
    if n == 0:
        return _EMPTY_KEY
    return b"".join((_II.pack(12 + n, n), key, I64.pack(version)))


def _read_value(mv: memoryview, p: int, view: bool) -> tuple[Buffer, int]:
    size, n = _II.unpack_from(mv, p)
    if size < 0 or size > len(mv) - p - 4:
        raise MalformedCommand(f"table value declares {size} bytes; fewer remain")
    p += 8
    if n == 0:
        return b"", p
    e = _span(mv, p, n, "table value")
    return (mv[p:e] if view else bytes(mv[p:e])), e


def _write_value(value: Buffer) -> bytes:
    n = len(value)
    if n == 0:
        return _EMPTY_VALUE
    return b"".join((_II.pack(4 + n, n), value))


def read_keys(mv: memoryview, p: int, view: bool) -> tuple[tuple[TableKey, ...], int]:
    n, p = _count(mv, p, 8)
    out = []
    for _ in range(n):
        key, version, p = _read_key(mv, p, view)
        out.append(TableKey(key, version))
    return tuple(out), p


def write_keys(keys: Sequence[TableKey]) -> bytes:
    return I32.pack(len(keys)) + b"".join(_write_key(k.key, k.version) for k in keys)


def read_entries(mv: memoryview, p: int, view: bool) -> tuple[tuple[TableEntry, ...], int]:
    n, p = _count(mv, p, 16)
    out = []
    for _ in range(n):
        key, version, p = _read_key(mv, p, view)
        value, p = _read_value(mv, p, view)
        out.append(TableEntry(key, value, version))
    return tuple(out), p


def write_entries(entries: Sequence[TableEntry]) -> bytes:
    parts: list[Buffer] = [I32.pack(len(entries))]
    for e in entries:
        parts.append(_write_key(e.key, e.version))
        parts.append(_write_value(e.value))
    return b"".join(parts)


def read_itargs(mv: memoryview, p: int, view: bool) -> tuple[TableIteratorArgs, int]:
    fields: list[Buffer] = []
    for _ in range(4):
        if len(mv) - p >= 4:
            value, p = read_bytes(mv, p, view)
            fields.append(value)
        else:
            fields.append(b"")
    return TableIteratorArgs(*fields), p


def write_itargs(args: TableIteratorArgs) -> bytes:
    parts: list[Buffer] = []
    for b in (args.continuation_token, args.prefix_filter, args.from_key, args.to_key):
        parts.append(I32.pack(len(b)))
        parts.append(b)
    return b"".join(parts)


def read_caus(
    mv: memoryview, p: int, view: bool
) -> tuple[tuple[ConditionalAttributeUpdate, ...], int]:
    n, p = _count(mv, p, _CAU.size)
    out = []
    for _ in range(n):
        raw, kind, new, old = _CAU.unpack_from(mv, p)
        p += _CAU.size
        out.append(ConditionalAttributeUpdate(uuid_from_bytes(raw), kind, new, old))
    return tuple(out), p


def write_caus(updates: Sequence[ConditionalAttributeUpdate]) -> bytes:
    return I32.pack(len(updates)) + b"".join(
        _CAU.pack(u.attribute_id.bytes, u.update_type, u.new_value, u.old_value) for u in updates
    )


def read_chunks(mv: memoryview, p: int, view: bool) -> tuple[tuple[ChunkInfo, ...], int]:
    n, p = _count(mv, p, _CHUNK_HEAD.size + 3)
    out = []
    for _ in range(n):
        meta, stored, start = _CHUNK_HEAD.unpack_from(mv, p)
        name, p = read_str(mv, p + _CHUNK_HEAD.size)
        exists = mv[p] != 0
        p += 1
        out.append(ChunkInfo(meta, stored, start, name, exists))
    return tuple(out), p


def write_chunks(chunks: Sequence[ChunkInfo]) -> bytes:
    parts = [I32.pack(len(chunks))]
    for c in chunks:
        parts.append(_CHUNK_HEAD.pack(c.length_in_metadata, c.length_in_storage, c.start_offset))
        parts.append(encode_str(c.chunk_name))
        parts.append(b"\x01" if c.exists_in_storage else b"\x00")
    return b"".join(parts)


def read_pairs(mv: memoryview, p: int, view: bool) -> tuple[tuple[tuple[str, int], ...], int]:
    n, p = _count(mv, p, 10)
    out = []
    for _ in range(n):
        name, p = read_str(mv, p)
        (offset,) = I64.unpack_from(mv, p)
        p += 8
        out.append((name, offset))
    return tuple(out), p


def write_pairs(pairs: Sequence[tuple[str, int]]) -> bytes:
    return I32.pack(len(pairs)) + b"".join(encode_str(s) + I64.pack(o) for s, o in pairs)


def read_event(mv: memoryview, p: int, view: bool) -> tuple[Buffer, int]:
    t, n = _II.unpack_from(mv, p)
    if t != 0:
        raise MalformedCommand(f"embedded event has type {t}, expected 0")
    p += 8
    e = _span(mv, p, n, "embedded event")
    return (mv[p:e] if view else bytes(mv[p:e])), e


def write_event(data: Buffer) -> bytes:
    return b"".join((_II.pack(0, len(data)), data))


def read_padding(mv: memoryview, p: int, view: bool) -> tuple[int, int]:
    return len(mv) - p, len(mv)


def write_padding(length: int) -> bytes:
    return bytes(length)


def drop_tail(frame: bytes, cut: int) -> bytes:
    """``frame`` without its last ``cut`` payload bytes, with the header's length fixed."""
    if not cut:
        return frame
    (type_code,) = I32.unpack_from(frame, 0)
    return _II.pack(type_code, len(frame) - 8 - cut) + frame[8 : len(frame) - cut]
