# Checksums of chunk files: one CRC-32C per 4 KiB block, kept in a sidecar file.
#
# Contract. Chunk file ``F`` has a sidecar ``F.crc`` whose entry ``j`` (8 bytes at ``8 * j``)
# is ``crc:u32 length:u32``: the CRC-32C of the first ``length`` bytes (1..4096) of block
# ``j`` of ``F``. A zero entry (or one past the sidecar's end) means "never written". Every
# write of a chunk file rewrites the entries of the blocks it touched (computed from the
# whole block, head included), and ``ChunkStore.sync`` fdatasyncs the sidecar with its
# chunk file, so a checkpoint never relies on bytes whose checksums are not durable.
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


def sums_path(chunk: Path) -> Path:
    return chunk.with_name(chunk.name + ".crc")


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


def write_entries(chunk: Path, first_block: int, entries: bytes) -> None:
    fd = os.open(sums_path(chunk), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        pwrite_all(fd, entries, first_block * ENTRY.size)
    finally:
        os.close(fd)


def read_entries(chunk: Path, first_block: int, count: int) -> bytes:
    try:
        fd = os.open(sums_path(chunk), os.O_RDONLY)
    except FileNotFoundError:
        raise ChunkDamaged(chunk, "its checksum file is missing") from None
    try:
        return os.pread(fd, count * ENTRY.size, first_block * ENTRY.size)
    finally:
        os.close(fd)


def check(chunk: Path, first_block: int, data: bytes, need: int) -> None:
    """Verify ``data`` (blocks from ``first_block`` on, as read) for its first ``need`` bytes."""
    count = -(-need // BLOCK)
    entries = read_entries(chunk, first_block, count)
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


def cut(chunk: Path, length: int) -> None:
    """After recovery cut ``chunk`` to ``length`` bytes: drop the entries past it, and
    re-sum a last partial block whose entry covers bytes past ``length`` (written after the
    checkpoint and cut off now; the bytes before ``length`` were synced by that checkpoint)."""
    path = sums_path(chunk)
    if not path.exists():
        return
    blocks = -(-length // BLOCK)
    os.truncate(path, min(path.stat().st_size, blocks * ENTRY.size))
    tail = length % BLOCK
    if not tail:
        return
    entry = read_entries(chunk, blocks - 1, 1)
    if len(entry) == ENTRY.size and ENTRY.unpack(entry)[1] > tail:
        with open(chunk, "rb") as f:
            f.seek((blocks - 1) * BLOCK)
            data = f.read(tail)
        if len(data) == tail:
            write_entries(chunk, blocks - 1, block_entries(data, 0, tail))
