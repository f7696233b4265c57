# Table records: how updates and removals are laid out in a table segment's bytes.
#
# Contract. A table segment is an ordinary segment whose data is a sequence of records
#     crc:u32 | magic:u8 | kind:u8 | key_len:u16 | value_len:u32 | key | value
# big-endian; ``crc`` is zlib's CRC-32 of everything after the crc field (magic through
# value), ``magic`` is 0x54 ("T"), ``kind`` is UPDATE or REMOVE (a removal carries no value,
# value_len 0). A record's *offset* in the segment is the version of the key it updates
# (Pravega's rule: versions are table segment offsets, so they only grow). The engine
# already CRCs its log; our own CRC exists so that a scan started at a position that is not
# a record boundary (a client's fromPosition, bytes appended by something other than the
# table layer) is detected instead of decoding garbage.
from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from typing import Final, NamedTuple

MAGIC: Final = 0x54
UPDATE: Final = 1
REMOVE: Final = 2

HEAD = struct.Struct(">IBBHI")
HEAD_SIZE: Final = HEAD.size  # 12
_BODY_HEAD = struct.Struct(">BBHI")
_CRC = struct.Struct(">I")

MAX_KEY_LENGTH: Final = 8192
MAX_VALUE_LENGTH: Final = 1_040_384
MAX_RECORD_SIZE: Final = HEAD_SIZE + MAX_KEY_LENGTH + MAX_VALUE_LENGTH


class CorruptRecord(ValueError):
    """Bytes at ``offset`` are not a table record (bad magic, kind, lengths or CRC)."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"no table record at offset {offset}: {reason}")
        self.offset = offset


def encode_record(kind: int, key: bytes, value: bytes = b"") -> bytes:
    head = _BODY_HEAD.pack(MAGIC, kind, len(key), len(value))
    crc = zlib.crc32(value, zlib.crc32(key, zlib.crc32(head)))
    return _CRC.pack(crc) + head + key + value


def encode_batch(
    changes: Sequence[tuple[bytes, bytes | None]], base_offset: int
) -> tuple[bytes, list[int]]:
    """Records for ``(key, value)`` pairs (value None = removal) and each record's offset."""
    parts: list[bytes] = []
    offsets: list[int] = []
    offset = base_offset
    for key, value in changes:
        rec = encode_record(REMOVE, key) if value is None else encode_record(UPDATE, key, value)
        parts.append(rec)
        offsets.append(offset)
        offset += len(rec)
    return b"".join(parts), offsets


class Record(NamedTuple):
    kind: int
    key: bytes
    value_start: int  # position of the value in the parsed buffer
    value_len: int
    end: int  # position just after the record in the parsed buffer


def fold_records(
    buf: bytes,
    base_offset: int,
    index: dict[bytes, tuple[int, bytes | int]],
    inline_limit: int,
) -> int:
    """Apply every whole record of ``buf`` to ``index`` (recovery's hot loop).

    ``buf`` holds segment bytes starting at segment offset ``base_offset``. An update sets
    ``index[key] = (offset, value)``, with the value's length instead of its bytes when it
    is longer than ``inline_limit``; a removal deletes the key. Returns how many bytes were
    consumed (whole records); raises :class:`CorruptRecord` at the first bad one, after
    applying everything before it (``CorruptRecord.offset`` says where).
    """
    unpack = HEAD.unpack_from
    crc32 = zlib.crc32
    mv = memoryview(buf)
    n = len(buf)
    p = 0
    while n - p >= HEAD_SIZE:  # each round consumes one record or stops
        crc, magic, kind, key_len, value_len = unpack(buf, p)
        if (
            magic != MAGIC
            or not 0 < key_len <= MAX_KEY_LENGTH
            or value_len > MAX_VALUE_LENGTH
            or not (kind == UPDATE or (kind == REMOVE and value_len == 0))
        ):
            raise CorruptRecord(base_offset + p, "bad header")
        ks = p + HEAD_SIZE
        vs = ks + key_len
        end = vs + value_len
        if end > n:
            break
        if crc32(mv[p + 4 : end]) != crc:
            raise CorruptRecord(base_offset + p, "CRC mismatch")
        if kind == UPDATE:
            index[buf[ks:vs]] = (
                base_offset + p,
                buf[vs:end] if value_len <= inline_limit else value_len,
            )
        else:
            index.pop(buf[ks:vs], None)
        p = end
    return p


def parse_record(buf: bytes | memoryview, pos: int, base_offset: int) -> Record | None:
    """The record starting at ``buf[pos]``, or None when ``buf`` ends before it does.

    ``base_offset`` is the segment offset of ``buf[0]`` (for error messages only).
    Raises :class:`CorruptRecord` when the bytes are not a valid record.
    """
    n = len(buf)
    if n - pos < HEAD_SIZE:
        return None
    crc, magic, kind, key_len, value_len = HEAD.unpack_from(buf, pos)
    if magic != MAGIC or kind not in (UPDATE, REMOVE):
        raise CorruptRecord(base_offset + pos, "bad magic or kind")
    if not 0 < key_len <= MAX_KEY_LENGTH or value_len > MAX_VALUE_LENGTH:
        raise CorruptRecord(base_offset + pos, "bad key or value length")
    if kind == REMOVE and value_len:
        raise CorruptRecord(base_offset + pos, "a removal with a value")
    key_start = pos + HEAD_SIZE
    value_start = key_start + key_len
    end = value_start + value_len
    if end > n:
        return None
    if zlib.crc32(buf[pos + 4 : end]) != crc:
        raise CorruptRecord(base_offset + pos, "CRC mismatch")
    return Record(kind, bytes(buf[key_start:value_start]), value_start, value_len, end)
