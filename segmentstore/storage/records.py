# Durable-log record formats: how every state change of a container is written to its log.
#
# Contract. A record is
#     crc:u32 | size:u32 | seq:u64 | type:u8 | body
# little-endian, where ``size`` counts the bytes after the size field (seq, type and body) and
# ``crc`` is the CRC-32C of everything after the crc field (size, seq, type, body), so a
# corrupted length is caught as surely as corrupted data. Sequence numbers are consecutive
# across the whole log of a container; recovery treats a gap as corruption. Bodies:
#     APPEND    seg:u64 offset:u64 event_count:u32 data
#     APPEND_W  seg:u64 offset:u64 event_count:u32 writer:16s event_number:i64 data
#     CREATE    seg:u64 segment_type:u32 name_len:u32 name attr_count:u32 (id:16s value:i64)*
#     SEAL      seg:u64
#     TRUNCATE  seg:u64 offset:u64
#     DELETE    seg:u64
#     MERGE     target:u64 source:u64 target_offset:u64 event_delta:i64 data
#     ATTRS     seg:u64 count:u32 (id:16s value:i64)*   final values; NULL value = removed
# Segment ids are container-local numbers given at creation, so records never carry names
# after CREATE. Offsets in APPEND/MERGE let recovery check that replay lands data where the
# live engine did. Appends are encoded on the hot path by the container with the precompiled
# structs below; everything else goes through ``encode``.
from __future__ import annotations

import struct

from .crc import crc32c, crc32c_extend

APPEND = 1
APPEND_W = 2
CREATE = 3
SEAL = 4
TRUNCATE = 5
DELETE = 6
MERGE = 7
ATTRS = 8

RECORD_TYPES = frozenset({APPEND, APPEND_W, CREATE, SEAL, TRUNCATE, DELETE, MERGE, ATTRS})

CRC = struct.Struct("<I")
PREFIX = struct.Struct("<IIQB")  # crc, size, seq, type
PREFIX_SIZE = PREFIX.size  # 17
# Hot-path headers without the crc: size, seq, type, then the body's fixed fields.
APPEND_HEAD = struct.Struct("<IQBQQI")
APPEND_W_HEAD = struct.Struct("<IQBQQI16sq")
APPEND_BODY = struct.Struct("<QQI")
APPEND_W_BODY = struct.Struct("<QQI16sq")
SEG = struct.Struct("<Q")
SEG_OFFSET = struct.Struct("<QQ")
CREATE_BODY = struct.Struct("<QII")
MERGE_BODY = struct.Struct("<QQQq")
COUNT = struct.Struct("<I")
ATTR = struct.Struct("<16sq")
# size field + seq + type: what ``size`` counts beyond the body.
SEQ_TYPE_SIZE = 9
APPEND_OVERHEAD = PREFIX_SIZE + APPEND_BODY.size  # bytes of log per plain append beyond data
MAX_RECORD_SIZE = 0xFFFFFFFF - 64


def encode(seq: int, rtype: int, body: bytes) -> bytes:
    """One complete record (crc included) for ``body``."""
    head = PREFIX.pack(0, SEQ_TYPE_SIZE + len(body), seq, rtype)[4:]
    crc = crc32c_extend(crc32c(head), body)
    return CRC.pack(crc) + head + body


def encode_attrs(values: dict[int, int]) -> bytes:
    """The ``count (id value)*`` tail shared by CREATE and ATTRS; keys are UUID ints."""
    parts = [COUNT.pack(len(values))]
    parts.extend(ATTR.pack(k.to_bytes(16, "big"), v) for k, v in values.items())
    return b"".join(parts)


def decode_attrs(buf: bytes, pos: int) -> tuple[dict[int, int], int]:
    """Inverse of ``encode_attrs`` reading at ``pos``; returns the values and the end position."""
    (count,) = COUNT.unpack_from(buf, pos)
    pos += COUNT.size
    values: dict[int, int] = {}
    for _ in range(count):
        key, value = ATTR.unpack_from(buf, pos)
        values[int.from_bytes(key, "big")] = value
        pos += ATTR.size
    return values, pos
