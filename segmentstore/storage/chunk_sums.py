# Checksums of chunk files: one CRC-32C per 4 KiB block, kept in the chunk file itself.
#
# Contract. A chunk file holds segment data in ``[0, chunk_bytes)`` and, from ``trailer =
# chunk_bytes`` on, its checksum entries: entry ``j`` (8 bytes at ``trailer + 8 * j``) is
# ``crc:u32 length:u32``, the CRC-32C of the first ``length`` bytes (1..4096) of data block
# ``j``. A zero entry (or one past the file's end) means "never written". Every write of a
# chunk file rewrites the entries of the blocks it touched (computed from the whole block,
# head included), through a buffered descriptor (entries are small; data may be O_DIRECT),
# and the one fdatasync ``ChunkStore.sync`` does per file before a checkpoint covers both.
# Keeping them in the same file costs no extra file to create, open or fsync (a sidecar file
# per chunk halved 1000-segment throughput: twice the files to fsync at each checkpoint).
# ``check`` is run on every block read from disk, before any byte of it is used: a block
# whose entry is missing, too short for the bytes wanted, or whose CRC differs raises
# ``ChunkDamaged`` naming the file and block. Bytes are never served unverified.
from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

from .crc import crc32c

BLOCK = 4096
ENTRY = struct.Struct("<II")
_ZERO_ENTRY = bytes(ENTRY.size)


class ChunkDamaged(Exception):
    """A chunk file is missing, too short, or fails its checksum; ``path`` names it."""

    def __init__(self, path: Path, what: str) -> None:
        super().__init__(f"chunk file {path.name}: {what}")
        self.path = path


def block_entries(data: bytes | mmap.mmap, start: int, valid: int) -> bytes:
    """Sidecar entries for ``data[start : start + valid]`` (a block-aligned run of bytes).

    ``data`` is bytes or an mmap: slicing either yields bytes, which crc32c requires."""
    pack = ENTRY.pack
    parts = []
    for at in range(start, start + valid, BLOCK):
        n = min(BLOCK, start + valid - at)
        parts.append(pack(crc32c(data[at : at + n]), n))
    return b"".join(parts)


def pwrite_all(fd: int, data: bytes | memoryview, at: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, at)
        view = view[n:]
        at += n


def write_entries(chunk: Path, trailer: int, first_block: int, entries: bytes) -> None:
    fd = os.open(chunk, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        write_entries_fd(fd, trailer, first_block, entries)
    finally:
        os.close(fd)


def write_entries_fd(fd: int, trailer: int, first_block: int, entries: bytes) -> None:
    """``write_entries`` through an open (buffered) descriptor of the chunk file."""
    pwrite_all(fd, entries, trailer + first_block * ENTRY.size)


def read_entries(chunk: Path, trailer: int, first_block: int, count: int) -> bytes:
    try:
        fd = os.open(chunk, os.O_RDONLY)
    except FileNotFoundError:
        raise ChunkDamaged(chunk, "is missing") from None
    try:
        return os.pread(fd, count * ENTRY.size, trailer + first_block * ENTRY.size)
    finally:
        os.close(fd)


def trailer_end(trailer: int, length: int) -> int:
    """Where the entries of a chunk holding ``length`` data bytes end in its file."""
    return trailer + -(-length // BLOCK) * ENTRY.size


def check(
    chunk: Path,
    trailer: int,
    first_block: int,
    data: bytes,
    need: int,
    fd: int = -1,
    entries: bytes | None = None,
) -> None:
    """Verify ``data`` (blocks from ``first_block`` on, as read) for its first ``need`` bytes.

    ``fd``: an open descriptor of ``chunk`` to read the entries through (else it is opened);
    ``entries``: the entries, read already (before the data, by a reader racing a writer)."""
    count = -(-need // BLOCK)
    if entries is not None:
        pass
    elif fd >= 0:
        entries = os.pread(fd, count * ENTRY.size, trailer + first_block * ENTRY.size)
    else:
        entries = read_entries(chunk, trailer, first_block, count)
    unpack = ENTRY.unpack_from
    for i in range(count):
        at = i * BLOCK
        want = min(BLOCK, need - at)
        if (i + 1) * ENTRY.size > len(entries) or entries[i * 8 : i * 8 + 8] == _ZERO_ENTRY:
            raise ChunkDamaged(chunk, f"block {first_block + i} has no checksum")
        crc, length = unpack(entries, i * ENTRY.size)
        if length < want or at + length > len(data):
            raise ChunkDamaged(
                chunk,
                f"block {first_block + i} holds {max(0, min(length, len(data) - at))} "
                f"checked bytes, {want} are needed (the file is short or was cut)",
            )
        if crc32c(data[at : at + length]) != crc:
            raise ChunkDamaged(chunk, f"checksum mismatch in block {first_block + i}")


def cut(chunk: Path, trailer: int, length: int) -> None:
    """After recovery cut a chunk back to ``length`` data bytes: zero the entries past it, and
    re-sum a last partial block whose entry covers bytes past ``length`` (written after the
    checkpoint and dropped now; the bytes before ``length`` were synced by that checkpoint).
    The data bytes past ``length`` stay in the file, but nothing vouches for them."""
    size = chunk.stat().st_size
    blocks = -(-length // BLOCK)
    start = trailer + blocks * ENTRY.size
    if size > start:
        fd = os.open(chunk, os.O_WRONLY)
        try:
            pwrite_all(fd, bytes(size - start), start)
        finally:
            os.close(fd)
    tail = length % BLOCK
    if not tail:
        return
    entry = read_entries(chunk, trailer, blocks - 1, 1)
    if len(entry) == ENTRY.size and ENTRY.unpack(entry)[1] > tail:
        with open(chunk, "rb") as f:
            f.seek((blocks - 1) * BLOCK)
            data = f.read(tail)
        if len(data) == tail:
            write_entries(chunk, trailer, blocks - 1, block_entries(data, 0, tail))
