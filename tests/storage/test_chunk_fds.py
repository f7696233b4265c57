"""Chunk-file descriptors kept open between writes (issue 19): a chunk written again is not
opened again, the number kept open is bounded, a deleted chunk's descriptors are closed, an
EMFILE closes the cache and retries, and a closed store holds no chunk descriptor."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from segmentstore.storage import SegmentStore
from segmentstore.storage.chunks import ALIGN, ChunkStore

from .conftest import small_config

CHUNK = 4 * ALIGN


def make(tmp_path: Path, direct: bool) -> ChunkStore:
    store = ChunkStore(tmp_path / "chunks", CHUNK, direct_io=direct)
    store.open()
    if direct and not store.direct:
        pytest.skip("this filesystem does not support O_DIRECT")
    return store


def open_in(directory: Path) -> list[str]:
    """Targets of this process's descriptors that lie in ``directory``."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(directory)):
            out.append(target)
    return out


def counting_opens(monkeypatch: pytest.MonkeyPatch, directory: Path) -> list[str]:
    calls: list[str] = []
    real = os.open

    def spy(path: Any, flags: int, mode: int = 0o777, **kw: Any) -> int:
        if str(path).startswith(str(directory)):
            calls.append(str(path))
        return real(path, flags, mode, **kw)

    monkeypatch.setattr(os, "open", spy)
    return calls


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "buffered"])
def test_a_chunk_written_again_is_not_opened_again(
    tmp_path: Path, direct: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make(tmp_path, direct)
    calls = counting_opens(monkeypatch, store.dir)
    model = b""
    for i in range(20):
        data = bytes([i]) * 100
        start = len(model) - len(model) % ALIGN if direct else len(model)
        store.write(3, start, [model[start:] + data])
        model += data
    # One descriptor for the data and one for the checksums, for all 20 writes.
    assert len(calls) == 2, calls
    monkeypatch.undo()
    assert store.read(3, 0, len(model)) == model
    store.close()
    assert open_in(store.dir) == []


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "buffered"])
def test_open_chunks_are_bounded_and_data_survives_eviction(tmp_path: Path, direct: bool) -> None:
    store = make(tmp_path, direct)
    store.fds.max_files = 3
    written: dict[int, bytes] = {}
    for rnd in range(3):
        for seg_id in range(1, 9):
            data = bytes([seg_id + rnd]) * 300
            old = written.get(seg_id, b"")
            start = len(old) - len(old) % ALIGN if direct else len(old)
            store.write(seg_id, start, [old[start:] + data])
            written[seg_id] = old + data
            assert len(store.fds) <= 3
            assert len(open_in(store.dir)) <= 6
    for seg_id, data in written.items():
        assert store.read(seg_id, 0, len(data)) == data
    store.close()


def test_deleting_a_chunk_closes_its_descriptors(tmp_path: Path) -> None:
    store = make(tmp_path, False)
    store.write(5, 0, [b"x" * 100])
    assert len(open_in(store.dir)) == 2
    store.delete(5, 0, 0)
    assert open_in(store.dir) == []
    assert not store.path(5, 0).exists()
    # Written again after the delete: a new file, not the unlinked inode.
    store.write(5, 0, [b"y" * 10])
    assert store.read(5, 0, 10) == b"y" * 10
    store.close()


def test_too_many_open_files_empties_the_cache_and_retries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make(tmp_path, False)
    for seg_id in range(1, 4):
        store.write(seg_id, 0, [b"a" * 10])
    assert len(store.fds) == 3
    real = os.open
    failed: list[int] = []

    def emfile_once(path: Any, flags: int, mode: int = 0o777, **kw: Any) -> int:
        if not failed and str(path).startswith(str(store.dir)):
            failed.append(1)
            raise OSError(errno.EMFILE, "Too many open files")
        return real(path, flags, mode, **kw)

    monkeypatch.setattr(os, "open", emfile_once)
    store.write(9, 0, [b"b" * 10])
    monkeypatch.undo()
    assert failed == [1]
    assert len(store.fds) == 1  # only the chunk just written
    assert store.read(9, 0, 10) == b"b" * 10
    store.close()


async def test_a_closed_store_keeps_no_chunk_descriptor(tmp_path: Path) -> None:
    s = await SegmentStore.open(small_config(tmp_path / "data", flush_interval_s=0.01))
    for i in range(5):
        await s.create_segment(f"s/{i}")
        await s.append(f"s/{i}", b"z" * 1000)
    await s.close()
    assert open_in(tmp_path / "data") == []
