# The durable log (write-ahead log) of one container: numbered files of CRC'd records.
#
# Contract.
# * ``WalWriter`` is driven from ONE thread at a time (the container's log thread), never the
#   event loop. ``write_batch`` appends a group of already-encoded records with one write and,
#   in fsync mode "always", one fdatasync (on Linux both in one ``pwritev(RWF_DSYNC)``, the
#   same guarantee in one syscall; write + fdatasync where the flag is refused); when it
#   returns the records are on disk. Records go at ``pwritev`` offsets, never the file offset.
# * When a write or sync fails, ``write_batch`` raises OSError and the batch counts as not
#   written: the file is cut back to its last good end (best effort), closed, and the next
#   batch goes into a NEW file whose header names the previous file's valid length. So
#   garbage from a failed write can never sit between good records, and after fsync errors
#   (when the kernel may have dropped dirty pages) we never trust that file's tail again.
# * A file header is ``magic | index:u64 | first_seq:u64 | prev_valid_len:i64 | crc:u32``;
#   ``prev_valid_len`` is where the previous file's records end (-1: no previous file). The
#   header is fsynced (with the directory entry) before any record goes into the file, and a
#   full file is fsynced when it is closed; not in fsync mode "never", which promises nothing
#   on power loss. There a recycled file keeps its old records as dirty pages, and syncing
#   its header would write them all out (tens of ms per roll, stalling every append). After
#   a power loss, recovery still stops at the first missing or damaged record.
# * The native lane (log_thread.py, _dsync.c) may write a batch instead of ``write_batch``,
#   at the offset ``dsync_target`` gives and only where that is the same write (mode
#   "always", RWF_DSYNC, the file open, no roll due); ``dsync_written`` then advances the
#   file's end on the loop, while the log thread is idle. A batch the lane failed to write
#   (or wrote short) goes to ``write_batch`` unchanged, which writes it again, whole, at the
#   same offset: safe, because nothing in it was acknowledged, every byte the lane may have
#   left lies at or past ``_pos`` (the end of the last durable record, so nothing durable is
#   overwritten), and ``write_batch`` either makes the whole range durable in one
#   pwritev(RWF_DSYNC) / write + fdatasync or abandons the file cut back to ``_pos``.
# * Spare files: the next log files are zero-filled ahead of time (or recycled from log
#   files a checkpoint made obsolete), so a batch overwrites allocated blocks and its
#   fdatasync flushes data only. Recovery (recovery.py) therefore treats zeros, or an intact
#   record with an older sequence number, after the last record as a clean end.
from __future__ import annotations

import contextlib
import errno
import os
import struct
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .api import FsyncMode
from .crc import crc32c

MAGIC = b"SSWAL001"
_HEADER = struct.Struct("<8sQQq")
_HEADER_CRC = struct.Struct("<I")
HEADER_SIZE = _HEADER.size + _HEADER_CRC.size
_SPARES = 2  # ready-made log files kept in the pool (zero-filling tops it up to this)
# Retired log files are recycled into the pool up to this many (512 MiB with the default
# 64 MiB files), so that a burst of rolls between two checkpoints is absorbed: a retired
# file that is deleted because the pool is full has to be replaced later by zero-filling,
# which costs about as much CPU as writing the file (the kernel's copy into new page-cache
# pages; on a VM with free page reporting, a host page fault per page too). Zero-filling
# runs only when the pool is empty and no rolled file awaits recycling (at start, or after
# files were set aside); a roll that finds no spare opens a new, growing file instead.
_MAX_SPARES = 8
_ZERO_STEP = 1 << 20  # zero-fill a spare log file this much per fdatasync

FaultHook = Callable[[str], None]
"""Called with an operation name ("wal.open", "wal.write", "wal.fsync", "chunk.write",
"chunk.read", ...)
just before that I/O happens; raising OSError there simulates the failure (tests only)."""


def log_file_name(index: int) -> str:
    return f"{index:016d}.log"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_RWF_DSYNC: int = getattr(os, "RWF_DSYNC", 0)
_DSYNC_WRITES = bool(_RWF_DSYNC)


def _write_all(fd: int, parts: Sequence[bytes | bytearray], pos: int, flags: int = 0) -> int:
    """``parts`` at file offset ``pos``: one pwritev per up to 1024 pieces (IOV_MAX),
    resuming after short writes. With ``flags=RWF_DSYNC`` each call is durable (as after
    an fdatasync) when it returns."""
    views = [memoryview(p) for p in parts]
    total = 0
    i = 0
    while i < len(views):
        n = os.pwritev(fd, views[i : i + 1024], pos + total, flags)
        total += n
        while n > 0:
            v = views[i]
            if n >= len(v):
                n -= len(v)
                i += 1
            else:
                views[i] = v[n:]
                n = 0
        while i < len(views) and not views[i]:
            i += 1
    return total


def encode_header(index: int, first_seq: int, prev_valid_len: int) -> bytes:
    head = _HEADER.pack(MAGIC, index, first_seq, prev_valid_len)
    return head + _HEADER_CRC.pack(crc32c(head))


class WalWriter:
    """Appends record batches to the current log file; rolls files; survives I/O errors."""

    def __init__(self, log_dir: Path, mode: FsyncMode, interval_s: float, file_bytes: int) -> None:
        self.dir = log_dir
        self.mode = mode
        self.interval_s = interval_s
        self.file_bytes = file_bytes
        self.fault: FaultHook | None = None
        self._dsync = _DSYNC_WRITES  # fsync "always": write and sync in one pwritev
        self._fd: int | None = None
        self._index = 0  # index of the open file, or of the next one to open
        self._pos = 0  # end of the last good record in the open file
        self._prev_valid = -1  # valid length of the previous file, for the next header
        self._last_sync = time.monotonic()
        self._unsynced = False
        self.bytes_written = 0
        self.fsyncs = 0
        # Where each new log file came from, and what became of retired ones.
        self.files_zero_filled = 0
        self.files_recycled = 0
        self.files_created = 0  # opened with no spare ready: a growing file
        self.files_deleted = 0
        # Ready-made log files (zero-filled or recycled) and the files that saw a failed
        # write (their tails may hold records with sequence numbers we reuse: never recycled).
        self._spares: list[Path] = []
        self._spare_lock = threading.Lock()
        self._preparing = False
        self._abandoned: set[int] = set()
        # Full log files closed by ``_roll``: the next checkpoints retire them into the pool.
        self._rolled: set[int] = set()

    def start(self, next_index: int, prev_valid_len: int) -> None:
        """Continue after recovery: the next batch opens file ``next_index``."""
        self._index = next_index
        self._prev_valid = prev_valid_len
        for path in self.dir.glob("spare-*.tmp"):
            if path.stat().st_size >= self.file_bytes and len(self._spares) < _MAX_SPARES:
                self._spares.append(path)
            else:
                path.unlink()

    @property
    def current_index(self) -> int:
        """Index of the file the next record lands in; every older file holds only older records."""
        return self._index

    def _hook(self, op: str) -> None:
        if self.fault is not None:
            self.fault(op)

    def _take_spare(self) -> Path | None:
        with self._spare_lock:
            return self._spares.pop() if self._spares else None

    @property
    def spare_wanted(self) -> bool:
        """True when the pool of ready log files is low (call ``prepare_spare`` off-loop)."""
        # Files the next checkpoint will recycle count too: zero-fill only what recycling
        # will not supply.
        return not self._preparing and not self._spares and not self._rolled

    def prepare_spare(self) -> None:
        """Zero-fill a future log file (runs in a worker thread, not the log thread).

        Overwriting blocks that are already allocated and written changes no metadata, so
        the log's fdatasync flushes only data: no ext4 journal commit, which would also
        drag in the metadata of every chunk file written meanwhile.
        """
        with self._spare_lock:
            if self._preparing or len(self._spares) >= _SPARES:
                return
            self._preparing = True
            path = self.dir / f"spare-{uuid.uuid4().hex}.tmp"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                # In steps of _ZERO_STEP, each made durable before the next: one 64 MiB
                # flush would queue ahead of the live log's fdatasyncs on the same disk and
                # stall the appends acknowledged meanwhile (measured: 50-200 ms, once per file).
                zeros = bytes(min(self.file_bytes, _ZERO_STEP))
                left = self.file_bytes
                while left > 0:
                    left -= os.write(fd, zeros[: min(left, len(zeros))])
                    os.fdatasync(fd)
            finally:
                os.close(fd)
        except OSError:
            with contextlib.suppress(OSError):
                path.unlink()
            raise
        finally:
            with self._spare_lock:
                self._preparing = False
        with self._spare_lock:
            self._spares.append(path)
            self.files_zero_filled += 1

    def _open(self, first_seq: int) -> None:
        path = self.dir / log_file_name(self._index)
        self._hook("wal.open")
        spare = self._take_spare()
        if spare is not None:
            # A zero-filled or recycled file: its old content lies after our records, and
            # recovery tells it apart by its zeros or its older sequence numbers.
            os.replace(spare, path)
            fd = os.open(path, os.O_WRONLY)
        else:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            self.files_created += 1
        try:
            header = encode_header(self._index, first_seq, self._prev_valid)
            if os.write(fd, header) != len(header):
                raise OSError(f"short write of log header to {path}")
            if self.mode != "never":
                os.fdatasync(fd)
                fsync_dir(self.dir)
        except OSError:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise
        self._fd = fd
        self._pos = HEADER_SIZE

    def _abandon(self) -> None:
        """After a failed write/sync: cut the file back to its good end and never reuse it."""
        fd = self._fd
        self._fd = None
        if fd is None:
            return
        try:
            os.ftruncate(fd, self._pos)
            os.fdatasync(fd)
        except OSError:
            pass  # the next file's header still bounds this one at self._pos
        finally:
            os.close(fd)
        self._prev_valid = self._pos
        self._abandoned.add(self._index)
        self._index += 1

    def write_batch(self, parts: Sequence[bytes | bytearray], first_seq: int) -> float:
        """Write ``parts`` (whole records, first numbered ``first_seq``); returns sync seconds."""
        if self._fd is None:
            self._open(first_seq)
        fd = self._fd
        assert fd is not None
        sync_s = 0.0
        total = 0
        try:
            self._hook("wal.write")
            if self.mode == "always" and self._dsync:
                # Write and fdatasync in one syscall: the log thread needs the GIL back once
                # per batch, not twice. The whole call counts as the sync.
                self._hook("wal.fsync")
                t0 = time.perf_counter()
                try:
                    total = _write_all(fd, parts, self._pos, _RWF_DSYNC)
                except OSError as exc:
                    if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                        raise
                    self._dsync = False  # not on this file system: write, then fdatasync
                    total = _write_all(fd, parts, self._pos)
                    os.fdatasync(fd)
                self.fsyncs += 1
                self._unsynced = False
                sync_s = time.perf_counter() - t0
            elif self.mode == "always" or (
                self.mode == "interval" and time.monotonic() - self._last_sync >= self.interval_s
            ):
                total = _write_all(fd, parts, self._pos)
                t0 = time.perf_counter()
                self._hook("wal.fsync")
                os.fdatasync(fd)
                sync_s = time.perf_counter() - t0
                self._last_sync = time.monotonic()
                self.fsyncs += 1
                self._unsynced = False
            else:
                total = _write_all(fd, parts, self._pos)
                self._unsynced = True
        except OSError:
            self._abandon()
            raise
        self._pos += total
        self.bytes_written += total
        if self._pos >= self.file_bytes:
            self._roll()
        return sync_s

    def dsync_target(self, nbytes: int) -> tuple[int, int] | None:
        """(fd, offset) where a batch of ``nbytes`` may be written by the native lane
        (log_thread.py) instead of ``write_batch``, or None when it must not: fsync mode
        "always" with RWF_DSYNC working, a file open, no fault hook (tests inject failures
        through ``write_batch``), and the batch ending before ``file_bytes`` (a roll stays on
        the log thread). Called on the loop while the log thread has no job."""
        fd = self._fd
        if (
            fd is None
            or self.mode != "always"
            or not self._dsync
            or self.fault is not None
            or self._pos + nbytes >= self.file_bytes
        ):
            return None
        return fd, self._pos

    def dsync_written(self, nbytes: int) -> None:
        """The native lane wrote and synced ``nbytes`` at ``dsync_target``'s offset."""
        self._pos += nbytes
        self.bytes_written += nbytes
        self.fsyncs += 1
        self._unsynced = False

    def _roll(self) -> None:
        fd = self._fd
        assert fd is not None
        try:
            if self._unsynced and self.mode != "never":
                os.fdatasync(fd)
                self.fsyncs += 1
                self._unsynced = False
        finally:
            self._fd = None
            os.close(fd)
            self._prev_valid = self._pos
            self._rolled.add(self._index)
            self._index += 1

    def sync(self) -> None:
        """fsync pending writes (fsync modes "interval" and "never" at close)."""
        if self._fd is not None and self._unsynced:
            self._hook("wal.fsync")
            os.fdatasync(self._fd)
            self.fsyncs += 1
            self._unsynced = False
            self._last_sync = time.monotonic()

    def close(self) -> None:
        try:
            self.sync()
        finally:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def delete_files_before(self, index: int) -> int:
        """Retire log files numbered below ``index`` (all their records are checkpointed).

        Full-size files become spares (recycled: no zero-filling needed); the rest go.
        """
        removed = 0
        for info in list_log_files(self.dir):
            if info.index >= index:
                continue
            recycle = info.index not in self._abandoned and info.size >= self.file_bytes
            with self._spare_lock:
                if recycle and len(self._spares) < _MAX_SPARES:
                    spare = self.dir / f"spare-{uuid.uuid4().hex}.tmp"
                    os.replace(info.path, spare)
                    self._spares.append(spare)
                    self.files_recycled += 1
                else:
                    info.path.unlink(missing_ok=True)
                    self.files_deleted += 1
            self._abandoned.discard(info.index)
            removed += 1
        self._rolled = {i for i in self._rolled if i >= index}
        return removed


@dataclass(slots=True)
class LogFileInfo:
    index: int
    path: Path
    size: int
    first_seq: int = -1
    prev_valid_len: int = -1
    header_ok: bool = False


def list_log_files(log_dir: Path) -> list[LogFileInfo]:
    """The log files in ``log_dir`` by index, with their headers read (``header_ok``)."""
    infos = []
    for path in log_dir.glob("*.log"):
        try:
            index = int(path.stem)
        except ValueError:
            continue
        size = path.stat().st_size
        info = LogFileInfo(index, path, size)
        with open(path, "rb") as f:
            raw = f.read(HEADER_SIZE)
        if len(raw) == HEADER_SIZE:
            magic, idx, first_seq, prev_valid = _HEADER.unpack_from(raw)
            (crc,) = _HEADER_CRC.unpack_from(raw, _HEADER.size)
            if magic == MAGIC and idx == index and crc == crc32c(raw[: _HEADER.size]):
                info.first_seq = first_seq
                info.prev_valid_len = prev_valid
                info.header_ok = True
        infos.append(info)
    infos.sort(key=lambda i: i.index)
    return infos
