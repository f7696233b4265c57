# Per-segment chunk files: where a container keeps segment data once it leaves the log.
#
# Contract. Segment ``id`` byte ``offset`` lives in chunk file ``k = offset // chunk_bytes`` at
# position ``offset - k * chunk_bytes``: fixed boundaries, so the set of files a segment needs
# follows from its start offset and length alone and no chunk list has to be checkpointed.
# File names are ``<segment id hex>.<k hex>`` (never the segment's name, which may hold any
# character). Writes are plain pwrites (not synced); ``sync`` makes a set of files durable
# and is called by the checkpointer before it records the lengths it relies on. Every
# method does blocking I/O and runs in a worker thread, never on the event loop.
from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from .wal import FaultHook, fsync_dir

ChunkId = tuple[int, int]
"""(segment id, chunk number): names a chunk file without holding a Path per file."""


class ChunkStore:
    def __init__(self, directory: Path, chunk_bytes: int) -> None:
        self.dir = directory
        self.chunk_bytes = chunk_bytes
        self.fault: FaultHook | None = None

    def _hook(self, op: str) -> None:
        if self.fault is not None:
            self.fault(op)

    def path(self, seg_id: int, k: int) -> Path:
        return self.dir / f"{seg_id:016x}.{k:08x}"

    def write(
        self, seg_id: int, offset: int, pieces: Sequence[bytes | bytearray | memoryview]
    ) -> set[ChunkId]:
        """Write ``pieces`` (consecutive) at segment ``offset``; returns the chunks touched."""
        touched: set[ChunkId] = set()
        cb = self.chunk_bytes
        fd = -1
        k_open = -1
        pos = offset
        try:
            for piece in pieces:
                view = memoryview(piece)
                done = 0
                while done < len(view):
                    k = pos // cb
                    in_file = pos - k * cb
                    n = min(len(view) - done, cb - in_file)
                    if k != k_open:
                        if fd >= 0:
                            os.close(fd)
                            fd = -1
                        self._hook("chunk.write")
                        fd = os.open(self.path(seg_id, k), os.O_WRONLY | os.O_CREAT, 0o644)
                        k_open = k
                        touched.add((seg_id, k))
                    written = os.pwrite(fd, view[done : done + n], in_file)
                    done += written
                    pos += written
        finally:
            if fd >= 0:
                os.close(fd)
        return touched

    def read(self, seg_id: int, offset: int, end: int) -> bytes:
        """Bytes ``[offset, end)`` of the segment (short only if a file is short)."""
        parts = []
        cb = self.chunk_bytes
        pos = offset
        while pos < end:
            k = pos // cb
            in_file = pos - k * cb
            n = min(end - pos, cb - in_file)
            fd = os.open(self.path(seg_id, k), os.O_RDONLY)
            try:
                piece = os.pread(fd, n, in_file)
            finally:
                os.close(fd)
            parts.append(piece)
            pos += len(piece)
            if len(piece) < n:
                break
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def sync(self, chunks: Iterable[ChunkId]) -> None:
        """fdatasync each chunk file, then the directory (new files' entries too)."""
        for seg_id, k in chunks:
            path = self.path(seg_id, k)
            try:
                fd = os.open(path, os.O_WRONLY)
            except FileNotFoundError:
                continue  # deleted meanwhile (segment deleted or truncated away)
            try:
                self._hook("chunk.fsync")
                os.fdatasync(fd)
            finally:
                os.close(fd)
        fsync_dir(self.dir)

    def delete(self, seg_id: int, first_k: int, last_k: int) -> None:
        """Remove chunk files ``first_k..last_k`` (inclusive) of a segment, if present."""
        for k in range(first_k, last_k + 1):
            self.path(seg_id, k).unlink(missing_ok=True)

    def list_files(self) -> dict[int, list[int]]:
        """Every chunk file on disk: segment id -> chunk numbers."""
        found: dict[int, list[int]] = {}
        for name in os.listdir(self.dir):
            seg_hex, _, k_hex = name.partition(".")
            try:
                seg_id = int(seg_hex, 16)
                k = int(k_hex, 16)
            except ValueError:
                continue
            found.setdefault(seg_id, []).append(k)
        return found

    def chunk_range(self, start: int, end: int) -> tuple[int, int]:
        """Chunk numbers holding bytes ``[start, end)``; empty (first > last) if none."""
        cb = self.chunk_bytes
        if end <= start:
            return (0, -1)
        return (start // cb, (end - 1) // cb)
