# Open descriptors of chunk files, kept from one flush to the next (bounded, LRU).
#
# Contract. ``data(seg_id, k)`` and ``sums(seg_id, k)`` return a descriptor of chunk file
# ``(seg_id, k)`` opened O_RDWR | O_CREAT: the data one with O_DIRECT when ``direct``, the
# sums one always buffered (checksum entries are small and unaligned). Both stay open until
# the chunk is evicted (the least recently used one, once more than ``max_files`` chunks are
# open), ``forget``-ten (before its file is deleted) or ``close_all`` (container close).
# Without this, every flush paid open + close twice per active segment: with 100 segments
# that is 400 syscalls a second, each one a GIL release and re-acquire on a worker thread
# racing the event loop for the GIL. ``max_files`` follows the soft RLIMIT_NOFILE (1/32 of
# it, at most 256 files = 512 descriptors), inside the storage reserve that
# ``server/resources.py`` keeps out of the connection cap; an open failing with EMFILE or
# ENFILE closes every cached descriptor and is tried once more.
#
# Callers serialise their use of one cache (the container's flush lock: writes, syncs and
# deletes of chunk files never run at once), so a descriptor handed out is not closed by
# another thread while it is in use; the lock here only keeps the table itself consistent.
from __future__ import annotations

import contextlib
import errno
import os
import resource
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

MAX_FILES = 256


def default_max_files() -> int:
    """Chunk files one cache may keep open: 1/32 of the soft descriptor limit, 4..256."""
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):  # pragma: no cover - no limit to read
        return 16
    if soft == resource.RLIM_INFINITY:
        return MAX_FILES
    return max(4, min(MAX_FILES, soft // 32))


class ChunkFds:
    """Open descriptors of recently written chunk files, two per file at most."""

    def __init__(self, path: Callable[[int, int], Path], direct_flag: int, max_files: int) -> None:
        self._path = path
        self._direct_flag = direct_flag
        self.max_files = max(1, max_files)
        # (seg_id, k) -> [data fd, sums fd]; -1 = not open (yet)
        self._open: OrderedDict[tuple[int, int], list[int]] = OrderedDict()
        self._lock = threading.Lock()
        self.opened = 0  # files opened, for tests and stats

    def data(self, seg_id: int, k: int) -> int:
        return self._get(seg_id, k, 0)

    def sums(self, seg_id: int, k: int) -> int:
        return self._get(seg_id, k, 1)

    def _get(self, seg_id: int, k: int, which: int) -> int:
        key = (seg_id, k)
        with self._lock:
            fds = self._open.get(key)
            if fds is not None:
                self._open.move_to_end(key)
                if fds[which] >= 0:
                    return fds[which]
        flags = os.O_RDWR | os.O_CREAT | (self._direct_flag if which == 0 else 0)
        try:
            fd = os.open(self._path(seg_id, k), flags, 0o644)
        except OSError as exc:
            if exc.errno not in (errno.EMFILE, errno.ENFILE):
                raise
            self.close_all()
            fd = os.open(self._path(seg_id, k), flags, 0o644)
        self.opened += 1
        evicted: list[int] = []
        with self._lock:
            fds = self._open.get(key)
            if fds is None:
                fds = self._open[key] = [-1, -1]
            if fds[which] >= 0:  # pragma: no cover - callers are serialised
                evicted.append(fds[which])
            fds[which] = fd
            self._open.move_to_end(key)
            while len(self._open) > self.max_files:
                _, old = self._open.popitem(last=False)
                evicted.extend(old)
        _close(evicted)
        return fd

    def forget(self, seg_id: int, k: int) -> None:
        """Close chunk ``(seg_id, k)``'s descriptors, if open (its file is about to go)."""
        with self._lock:
            fds = self._open.pop((seg_id, k), None)
        if fds is not None:
            _close(fds)

    def close_all(self) -> None:
        with self._lock:
            fds = [fd for pair in self._open.values() for fd in pair]
            self._open.clear()
        _close(fds)

    def __len__(self) -> int:
        return len(self._open)


def _close(fds: list[int]) -> None:
    for fd in fds:
        if fd >= 0:
            with contextlib.suppress(OSError):  # already closed: nothing to release
                os.close(fd)
