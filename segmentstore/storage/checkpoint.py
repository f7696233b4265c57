# Metadata checkpoints of one container: the state of every segment as of one log record.
#
# Contract. A checkpoint at sequence number S records, for each segment existing after record
# S: id, name, type, sealed, length, start offset, last-modified time and attributes, plus
# the next segment id. It is written only after every byte of those lengths is fsynced in
# the chunk files, so recovery = load the newest checkpoint + replay records after S.
# The file is written to a temporary name, fsynced, renamed and the directory fsynced, so a
# crash leaves either the old or the new checkpoint, never a torn one; a trailing CRC-32C
# catches later corruption, which makes ``load_newest`` raise (falling back to an older
# checkpoint would be wrong: the log it needs has been deleted).
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

from segmentstore_client.protocol.names import decode_name, encode_name

from .api import StoreCorrupted
from .crc import crc32c
from .records import decode_attrs, encode_attrs
from .wal import fsync_dir

MAGIC = b"SSCKPT01"
_HEAD = struct.Struct("<8sQQQ")  # magic, seq, next segment id, segment count
_ENTRY = struct.Struct("<QIBQQqI")  # id, type, flags, length, start offset, last modified, name len
_CRC = struct.Struct("<I")
_SEALED = 1


@dataclass(slots=True)
class SegmentRecord:
    seg_id: int
    name: str
    segment_type: int
    sealed: bool
    length: int
    start_offset: int
    last_modified_ms: int
    attrs: dict[int, int]


@dataclass(slots=True)
class Checkpoint:
    seq: int
    next_segment_id: int
    segments: list[SegmentRecord]


def checkpoint_name(seq: int) -> str:
    return f"checkpoint-{seq:020d}.ckp"


def encode(ckpt: Checkpoint) -> bytes:
    parts = [_HEAD.pack(MAGIC, ckpt.seq, ckpt.next_segment_id, len(ckpt.segments))]
    pack = _ENTRY.pack
    for s in ckpt.segments:
        name = encode_name(s.name)
        flags = _SEALED if s.sealed else 0
        parts.append(
            pack(
                s.seg_id,
                s.segment_type,
                flags,
                s.length,
                s.start_offset,
                s.last_modified_ms,
                len(name),
            )
        )
        parts.append(name)
        parts.append(encode_attrs(s.attrs))
    body = b"".join(parts)
    return body + _CRC.pack(crc32c(body))


def decode(data: bytes, origin: str) -> Checkpoint:
    if len(data) < _HEAD.size + _CRC.size:
        raise StoreCorrupted(origin, "checkpoint too short")
    body = data[: -_CRC.size]
    (crc,) = _CRC.unpack_from(data, len(body))
    if crc32c(body) != crc:
        raise StoreCorrupted(origin, "checkpoint CRC mismatch")
    magic, seq, next_id, count = _HEAD.unpack_from(body)
    if magic != MAGIC:
        raise StoreCorrupted(origin, "not a checkpoint file")
    pos = _HEAD.size
    segments = []
    for _ in range(count):
        seg_id, stype, flags, length, start, modified, name_len = _ENTRY.unpack_from(body, pos)
        pos += _ENTRY.size
        name = decode_name(body[pos : pos + name_len])
        pos += name_len
        attrs, pos = decode_attrs(body, pos)
        segments.append(
            SegmentRecord(
                seg_id, name, stype, bool(flags & _SEALED), length, start, modified, attrs
            )
        )
    return Checkpoint(seq, next_id, segments)


def write(directory: Path, ckpt: Checkpoint) -> Path:
    """Durably replace the container's checkpoint with ``ckpt``; returns its path."""
    data = encode(ckpt)
    final = directory / checkpoint_name(ckpt.seq)
    tmp = final.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        done = 0
        while done < len(view):
            done += os.write(fd, view[done:])
        os.fdatasync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, final)
    fsync_dir(directory)
    for old in directory.glob("checkpoint-*"):
        if old != final:
            old.unlink(missing_ok=True)
    return final


def load_newest(directory: Path) -> Checkpoint | None:
    """The newest complete checkpoint in ``directory``, or None if there is none yet."""
    names = sorted(p for p in directory.glob("checkpoint-*.ckp"))
    if not names:
        return None
    path = names[-1]
    return decode(path.read_bytes(), str(path))
