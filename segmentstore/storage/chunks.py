# Per-segment chunk files: where a container keeps segment data once it leaves the log.
#
# Contract. Segment ``id`` byte ``offset`` lives in chunk file ``k = offset // chunk_bytes`` at
# position ``offset - k * chunk_bytes``: fixed boundaries, so the set of files a segment needs
# follows from its start offset and length alone and no chunk list has to be checkpointed.
# File names are ``<segment id hex>.<k hex>`` (never the segment's name, which may hold any
# character). Writes are not synced; ``sync`` makes a set of files durable and is called by
# the checkpointer before it records the lengths it relies on. Every method does blocking I/O
# and runs in a worker thread, never on the event loop. Writes go through descriptors kept
# open between flushes (chunk_fds.py, bounded); ``delete`` closes a chunk's before the
# unlink and ``close`` closes them all. Writes, syncs and deletes must not run at once
# (the container's flush lock); reads open their own descriptors.
#
# Direct I/O. Where the filesystem allows it (and ``chunk_bytes`` is a multiple of 4 KiB),
# chunk files are written and read with O_DIRECT through a per-thread, page-aligned staging
# buffer, so segment data passes through the page cache never: the container's read cache
# already holds recent data, and each new page-cache page costs a page allocation plus a
# kernel copy (on a VM with free page reporting, a host page fault too) for data that is
# rarely read again from there. A write covers whole 4 KiB blocks: it starts at the block
# holding its first byte (the bytes before it in that block are the segment's own, passed in
# by the caller or read back from the file) and its last block is padded with zeros, which
# the next write overwrites. So a chunk file may be longer than the data it holds; lengths
# come from the checkpoint and the log, never from file sizes (recovery cuts files to them).
#
# Integrity. Every write also rewrites the per-4 KiB-block checksums of the blocks it touched,
# kept after the data in the same file (chunk_sums.py), and every read from disk reads whole blocks and
# verifies them before returning a byte: a missing or short file, or a block failing its
# checksum, raises ``ChunkDamaged`` naming the file. A write that starts inside a block
# verifies the head it reads back first, so damage is never re-summed into "good" data.
from __future__ import annotations

import errno
import logging
import mmap
import os
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

from . import chunk_sums as sums
from .chunk_fds import ChunkFds, default_max_files
from .chunk_sums import ChunkDamaged
from .wal import FaultHook, fsync_dir

log = logging.getLogger("segmentstore.storage")

ChunkId = tuple[int, int]
"""(segment id, chunk number): names a chunk file without holding a Path per file."""

ALIGN = 4096  # block size for direct I/O: offsets, lengths and buffer addresses
_STAGING = 4 * 1024 * 1024  # per-thread staging buffer; bigger writes and reads are split
_O_DIRECT: int = getattr(os, "O_DIRECT", 0)


def _direct_supported(directory: Path) -> bool:
    """Whether files in ``directory`` can be opened with O_DIRECT and written in 4 KiB blocks."""
    if not _O_DIRECT:
        return False
    probe = directory / ".direct-io-probe"
    buf = mmap.mmap(-1, ALIGN)
    try:
        fd = os.open(probe, os.O_RDWR | os.O_CREAT | os.O_TRUNC | _O_DIRECT, 0o644)
        try:
            return os.pwritev(fd, [buf], 0) == ALIGN and os.preadv(fd, [buf], 0) == ALIGN
        finally:
            os.close(fd)
    except OSError:
        return False
    finally:
        buf.close()
        probe.unlink(missing_ok=True)


class ChunkStore:
    def __init__(self, directory: Path, chunk_bytes: int, direct_io: bool = True) -> None:
        self.dir = directory
        self.chunk_bytes = chunk_bytes
        self.fault: FaultHook | None = None
        self._want_direct = direct_io and chunk_bytes % ALIGN == 0
        self.direct = False  # decided by ``open`` once the directory exists
        self._local = threading.local()
        # Descriptors for writes, kept open between flushes (chunk_fds.py).
        self.fds = ChunkFds(self.path, 0, default_max_files())

    def open(self) -> None:
        """Create the directory and decide between direct and buffered I/O."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.direct = self._want_direct and _direct_supported(self.dir)
        self.fds.close_all()
        self.fds = ChunkFds(self.path, _O_DIRECT if self.direct else 0, self.fds.max_files)
        if self.direct:
            how = "direct I/O (O_DIRECT)"
        elif self._want_direct:
            how = "buffered I/O (O_DIRECT is not supported here)"
        else:
            how = "buffered I/O"
        log.info("chunk files in %s: %s", self.dir, how)

    def _hook(self, op: str) -> None:
        if self.fault is not None:
            self.fault(op)

    def path(self, seg_id: int, k: int) -> Path:
        return self.dir / f"{seg_id:016x}.{k:08x}"

    def _staging(self) -> mmap.mmap:
        buf: mmap.mmap | None = getattr(self._local, "buf", None)
        if buf is None:
            buf = self._local.buf = mmap.mmap(-1, _STAGING)  # page-aligned, reused
        return buf

    # ------------------------------------------------------------------ writes

    def write(
        self, seg_id: int, offset: int, pieces: Sequence[bytes | bytearray | memoryview]
    ) -> set[ChunkId]:
        """Write ``pieces`` (consecutive) at segment ``offset``; returns the chunks touched.

        With direct I/O, bytes ``[offset rounded down to 4 KiB, offset)`` must already be in the
        file (they are read back and rewritten); callers that still hold them pass the write
        from the rounded-down offset instead, which saves that read.
        """
        if self.direct:
            return self._write_direct(seg_id, offset, pieces)
        touched: set[ChunkId] = set()
        cb = self.chunk_bytes
        data = b"".join(pieces) if len(pieces) != 1 else bytes(pieces[0])
        done = 0
        pos = offset
        while done < len(data):
            k = pos // cb
            in_file = pos - k * cb
            n = min(len(data) - done, cb - in_file)
            self._hook("chunk.write")
            path = self.path(seg_id, k)
            touched.add((seg_id, k))
            fd = self.fds.data(seg_id, k)
            lo = in_file - in_file % sums.BLOCK
            head = os.pread(fd, in_file - lo, lo) if lo < in_file else b""
            if head:
                sums_fd = self.fds.sums(seg_id, k)
                sums.check(path, cb, lo // sums.BLOCK, head, in_file - lo, sums_fd)
            sums.pwrite_all(fd, memoryview(data)[done : done + n], in_file)
            block = head + data[done : done + n]
            entries = sums.block_entries(block, 0, len(block))
            sums.write_entries_fd(self.fds.sums(seg_id, k), cb, lo // sums.BLOCK, entries)
            done += n
            pos += n
        return touched

    def _write_direct(
        self, seg_id: int, offset: int, pieces: Sequence[bytes | bytearray | memoryview]
    ) -> set[ChunkId]:
        cb = self.chunk_bytes
        stage_mm = self._staging()
        stage = memoryview(stage_mm)
        w = _DirectWriter(self, seg_id, stage_mm)
        # The staging buffer holds bytes [base, base + filled) of the segment; base is aligned.
        base = offset - offset % ALIGN
        filled = 0
        if base < offset:
            k = base // cb
            got = os.preadv(w.fd_for(k), [stage[:ALIGN]], base - k * cb)
            if got < offset - base:
                raise ChunkDamaged(
                    self.path(seg_id, k), f"lacks segment bytes [{base + got}, {offset})"
                )
            filled = offset - base
            block = (base - k * cb) // ALIGN
            sums_fd = self.fds.sums(seg_id, k)
            sums.check(self.path(seg_id, k), cb, block, stage_mm[:filled], filled, sums_fd)
        for piece in pieces:
            view = memoryview(piece).cast("B")
            done = 0
            while done < len(view):
                # Fill the buffer up to its end or the chunk file's, whichever is nearer
                # (both aligned), and write it out when full.
                cap = min(_STAGING, (base // cb + 1) * cb - base)
                n = min(cap - filled, len(view) - done)
                stage[filled : filled + n] = view[done : done + n]
                filled += n
                done += n
                if filled == cap:
                    w.write(stage[:filled], base, filled)
                    base += filled
                    filled = 0
        if filled:
            padded = -(-filled // ALIGN) * ALIGN
            stage[filled:padded] = bytes(padded - filled)
            w.write(stage[:padded], base, filled)
        return w.touched

    # ------------------------------------------------------------------ reads

    def read(self, seg_id: int, offset: int, end: int) -> bytes:
        """Bytes ``[offset, end)`` of the segment, verified; ChunkDamaged if they cannot be."""
        self._hook("chunk.read")
        parts = []
        cb = self.chunk_bytes
        pos = offset
        while pos < end:
            k = pos // cb
            in_file = pos - k * cb
            n = min(end - pos, cb - in_file)
            path = self.path(seg_id, k)
            lo = in_file - in_file % sums.BLOCK
            # Whole blocks: a block's checksum covers all of its bytes, not just those wanted.
            span = -(-(in_file + n - lo) // sums.BLOCK) * sums.BLOCK
            # The entries before the data: a flush extending the last block (another thread)
            # writes its data first, so entries read first never vouch for bytes the data
            # read missed; read after, they could (a false checksum mismatch).
            entries = sums.read_entries(path, cb, lo // sums.BLOCK, span // sums.BLOCK)
            try:
                if self.direct:
                    blocks = self._read_direct(path, lo, span)
                else:
                    fd = os.open(path, os.O_RDONLY)
                    try:
                        blocks = os.pread(fd, span, lo)
                    finally:
                        os.close(fd)
            except FileNotFoundError:
                raise ChunkDamaged(path, "is missing") from None
            sums.check(path, cb, lo // sums.BLOCK, blocks, in_file + n - lo, entries=entries)
            parts.append(blocks[in_file - lo : in_file - lo + n])
            pos += n
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _read_direct(self, path: Path, pos: int, n: int) -> bytes:
        """Up to ``n`` bytes from ``pos`` (block-aligned) of ``path``, short at its end."""
        stage = self._staging()
        parts: list[bytes] = []
        fd = os.open(path, os.O_RDONLY | _O_DIRECT)
        try:
            while n > 0:
                want = min(_STAGING, -(-n // ALIGN) * ALIGN)
                got = os.preadv(fd, [memoryview(stage)[:want]], pos)
                take = min(got, n)
                if take <= 0:
                    break
                parts.append(stage[:take])
                pos += take
                n -= take
                if got < want:
                    break  # end of file
        finally:
            os.close(fd)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    # ------------------------------------------------------------------ durability, cleanup

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
            self.fds.forget(seg_id, k)
            self.path(seg_id, k).unlink(missing_ok=True)

    def close(self) -> None:
        """Close the descriptors kept for writes (the store stays usable: they reopen)."""
        self.fds.close_all()

    def verify(self, seg_id: int, start: int, end: int, read: bool = True) -> list[tuple[int, str]]:
        """Problems of the chunk files holding bytes ``[start, end)``: (chunk, what).

        Sizes only unless ``read``: then every block is read and checked against its sum."""
        out: list[tuple[int, str]] = []
        first, last = self.chunk_range(start, end)
        cb = self.chunk_bytes
        for k in range(first, last + 1):
            path = self.path(seg_id, k)
            want = min(end - k * cb, cb)
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                out.append((k, f"chunk file {path.name} is missing"))
                continue
            # The file holds data, then the checksums of its blocks: both must be there.
            need = sums.trailer_end(cb, want)
            if size < need:
                out.append((k, f"chunk file {path.name} holds {size} bytes, needs {need}"))
                continue
            if not read:
                continue
            lo = max(start, k * cb)
            try:
                self.read(seg_id, lo, min(end, (k + 1) * cb))
            except ChunkDamaged as exc:
                out.append((k, str(exc)))
        return out

    def list_files(self) -> dict[int, list[int]]:
        """Every chunk file (or checksum file) on disk: segment id -> chunk numbers."""
        found: dict[int, set[int]] = {}
        for name in os.listdir(self.dir):
            seg_hex, _, k_hex = name.removesuffix(".crc").partition(".")
            try:
                seg_id = int(seg_hex, 16)
                k = int(k_hex, 16)
            except ValueError:
                continue
            found.setdefault(seg_id, set()).add(k)
        return {seg_id: sorted(ks) for seg_id, ks in found.items()}

    def chunk_range(self, start: int, end: int) -> tuple[int, int]:
        """Chunk numbers holding bytes ``[start, end)``; empty (first > last) if none."""
        cb = self.chunk_bytes
        if end <= start:
            return (0, -1)
        return (start // cb, (end - 1) // cb)


class _DirectWriter:
    """The open chunk file of one direct write, and the chunks it touched."""

    def __init__(self, store: ChunkStore, seg_id: int, stage: mmap.mmap) -> None:
        self.store = store
        self.seg_id = seg_id
        self.stage = stage  # what ``write``'s views look into (sliced to bytes for the CRC)
        self.fd = -1
        self.k = -1
        self.touched: set[ChunkId] = set()

    def fd_for(self, k: int) -> int:
        if k != self.k:
            self.store._hook("chunk.write")
            self.fd = self.store.fds.data(self.seg_id, k)
            self.k = k
            self.touched.add((self.seg_id, k))
        return self.fd

    def write(self, view: memoryview, seg_pos: int, valid: int) -> None:
        """Write ``view`` (whole blocks, the start of the staging buffer; its first ``valid``
        bytes are data) at segment offset ``seg_pos`` (aligned, one chunk), then its sums."""
        cb = self.store.chunk_bytes
        k = seg_pos // cb
        fd = self.fd_for(k)
        pos = seg_pos - k * cb
        entries = sums.block_entries(self.stage, 0, valid)
        while view:
            n = os.pwritev(fd, [view], pos)
            if n <= 0 or n % ALIGN:
                raise OSError(errno.EIO, f"short direct write ({n} of {len(view)} bytes)")
            view = view[n:]
            pos += n
        sums_fd = self.store.fds.sums(self.seg_id, k)
        sums.write_entries_fd(sums_fd, cb, (seg_pos - k * cb) // ALIGN, entries)
