"""fsync "always" writes a batch and syncs it in one pwritev(RWF_DSYNC) (storage/wal.py);
a file system that refuses the flag gets write + fdatasync instead, at the same offsets."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from segmentstore.storage import wal as wal_mod
from segmentstore.storage.wal import HEADER_SIZE, WalWriter, log_file_name

pytestmark = pytest.mark.skipif(not hasattr(os, "RWF_DSYNC"), reason="no RWF_DSYNC")


def _writer(tmp_path: Path) -> WalWriter:
    w = WalWriter(tmp_path, "always", 0.0, 1 << 20)
    w.start(1, -1)
    return w


def _body(tmp_path: Path, n: int) -> bytes:
    return (tmp_path / log_file_name(1)).read_bytes()[HEADER_SIZE : HEADER_SIZE + n]


def test_batches_land_back_to_back_with_one_dsync_write_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    real = os.pwritev

    def pwritev(fd: int, bufs: list[memoryview], pos: int, flags: int = 0) -> int:
        calls.append(flags)
        return real(fd, bufs, pos, flags)

    monkeypatch.setattr(wal_mod.os, "pwritev", pwritev)
    fdatasyncs: list[int] = []
    monkeypatch.setattr(wal_mod.os, "fdatasync", lambda fd: fdatasyncs.append(fd))
    w = _writer(tmp_path)
    w.write_batch([b"a" * 10, bytearray(b"b" * 5)], 1)
    w.write_batch([b"c" * 7], 3)
    w.close()
    assert _body(tmp_path, 22) == b"a" * 10 + b"b" * 5 + b"c" * 7
    assert calls == [os.RWF_DSYNC, os.RWF_DSYNC]
    assert w.fsyncs == 2 and len(fdatasyncs) == 1  # the header's, when the file opened
    assert w.bytes_written == 22


def test_refused_flag_falls_back_to_write_and_fdatasync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.pwritev

    def pwritev(fd: int, bufs: list[memoryview], pos: int, flags: int = 0) -> int:
        if flags:
            raise OSError(errno.EOPNOTSUPP, "Operation not supported")
        return real(fd, bufs, pos, flags)

    monkeypatch.setattr(wal_mod.os, "pwritev", pwritev)
    w = _writer(tmp_path)
    w.write_batch([b"x" * 9], 1)
    synced = []
    real_sync = os.fdatasync
    monkeypatch.setattr(wal_mod.os, "fdatasync", lambda fd: (synced.append(fd), real_sync(fd)))
    w.write_batch([b"y" * 4], 2)
    w.close()
    assert _body(tmp_path, 13) == b"x" * 9 + b"y" * 4
    assert len(synced) == 1  # the second batch: write, then fdatasync


def test_other_write_errors_fail_the_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def pwritev(fd: int, bufs: list[memoryview], pos: int, flags: int = 0) -> int:
        raise OSError(errno.EIO, "Input/output error")

    w = _writer(tmp_path)
    w.write_batch([b"ok"], 1)
    monkeypatch.setattr(wal_mod.os, "pwritev", pwritev)
    with pytest.raises(OSError, match="Input/output"):
        w.write_batch([b"lost"], 2)
    monkeypatch.undo()
    w.write_batch([b"next"], 2)  # into a new file, after the failed one was cut back
    w.close()
    assert _body(tmp_path, 2) == b"ok"
    assert (tmp_path / log_file_name(1)).stat().st_size == HEADER_SIZE + 2
    assert (tmp_path / log_file_name(2)).read_bytes()[HEADER_SIZE:][:4] == b"next"
