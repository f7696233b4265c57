"""A spare log file is zero-filled in steps, each made durable before the next
(storage/wal.py ``prepare_spare``): one flush of a whole 64 MiB file queued ahead of the
live log's fdatasyncs on the same disk and stalled the appends acknowledged meanwhile
(50-200 ms once per file, seen as the relay's and the tail reader's p99)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from segmentstore.storage import wal as wal_mod
from segmentstore.storage.wal import WalWriter


def test_spare_is_zero_filled_in_durable_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file_bytes = 5 * wal_mod._ZERO_STEP + 12_345
    w = WalWriter(tmp_path, "always", 0.0, file_bytes)
    unsynced_at_sync: list[int] = []
    written = {"since_sync": 0}
    real_write, real_sync = os.write, os.fdatasync

    def write(fd: int, data: bytes | memoryview) -> int:
        n = real_write(fd, data)
        written["since_sync"] += n
        return n

    def fdatasync(fd: int) -> None:
        unsynced_at_sync.append(written["since_sync"])
        written["since_sync"] = 0
        real_sync(fd)

    monkeypatch.setattr(wal_mod.os, "write", write)
    monkeypatch.setattr(wal_mod.os, "fdatasync", fdatasync)
    w.prepare_spare()

    assert w.files_zero_filled == 1
    (spare,) = tmp_path.glob("spare-*.tmp")
    assert spare.stat().st_size == file_bytes
    assert spare.read_bytes() == bytes(file_bytes)
    # never more than one step unsynced, and nothing left unsynced at the end
    assert written["since_sync"] == 0
    assert max(unsynced_at_sync) <= wal_mod._ZERO_STEP
    assert sum(unsynced_at_sync) == file_bytes
    assert len(unsynced_at_sync) == 6
