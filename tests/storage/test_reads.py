"""``SegmentStore.read`` as one call that owns a whole read (api.py): from the cache, from
chunk files inside the caller's disk guard, or parked at the tail of an open segment, and
what a parked read returns when the segment grows, times out, is sealed, truncated or
deleted under it, or the store closes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from segmentstore.storage import (
    InvalidOffset,
    ReadResult,
    SegmentNotFound,
    SegmentStore,
    SegmentTruncated,
)

from .conftest import small_config

NAME = "scope/stream/0.#epoch.0"
WAIT = 10.0  # longer than any test: a parked read that returns early was woken


class Guard:
    """A disk guard that records its calls (and, through the store's fault hook, the chunk
    reads), optionally running ``during`` inside it before the read goes on."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.sizes: list[int] = []
        self.during: asyncio.Event | None = None  # set: block until it is set

    def fault_hook(self, op: str) -> None:
        if op == "chunk.read":
            self.events.append(op)

    @contextlib.asynccontextmanager
    async def __call__(self, size: int) -> AsyncIterator[None]:
        self.sizes.append(size)
        self.events.append("enter")
        if self.during is not None:
            await self.during.wait()
        try:
            yield
        finally:
            self.events.append("exit")


async def _parked(store: SegmentStore, offset: int, **kw: float) -> asyncio.Task[ReadResult]:
    """A read task parked at ``offset`` (checked not done after the loop turned a few times)."""
    task = asyncio.create_task(store.read(NAME, offset, 1000, wait=kw.get("wait", WAIT)))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not task.done()
    return task


async def test_a_parked_read_is_woken_by_an_append_and_gets_the_data(
    store: SegmentStore,
) -> None:
    await store.create_segment(NAME)
    await store.append(NAME, b"abc")
    guard = Guard()
    loop = asyncio.get_running_loop()
    for offset, expected in ((3, b"defg"), (9, b"j")):  # at the tail, and past it
        task = asyncio.create_task(store.read(NAME, offset, 100, wait=WAIT, disk_guard=guard))
        await asyncio.sleep(0.02)
        assert not task.done()
        t0 = loop.time()
        await store.append(NAME, b"defg" if offset == 3 else b"hi")  # 9 is not reached yet
        if offset == 9:
            await asyncio.sleep(0.02)
            assert not task.done()  # the commit stayed at or below the offset
            await store.append(NAME, b"j")
        result = await asyncio.wait_for(task, 2)
        assert loop.time() - t0 < 1.5
        assert result == ReadResult(offset, expected, True, False)
    assert guard.events == []  # the new data came from the cache: no disk slot taken


async def test_a_parked_read_times_out_empty_at_tail(store: SegmentStore) -> None:
    loop = asyncio.get_running_loop()
    await store.create_segment(NAME)
    await store.append(NAME, b"abc")
    t0 = loop.time()
    assert await store.read(NAME, 3, 100, wait=0.05) == ReadResult(3, b"", True, False)
    assert 0.04 <= loop.time() - t0 < 1
    # A read that timed out leaves nothing parked behind (an idle segment polled by tail
    # reads must not collect one waiter per read).
    assert store._route(NAME)._segments[NAME].waiters is None
    # Past the end too; wait=0 answers at once; without wait, past the end is an error.
    assert await store.read(NAME, 7, 100, wait=0.05) == ReadResult(7, b"", True, False)
    assert await store.read(NAME, 7, 100, wait=0) == ReadResult(7, b"", True, False)
    with pytest.raises(InvalidOffset):
        await store.read(NAME, 7, 100)
    # At the tail without wait: the empty tail result at once (the old contract).
    assert await store.read(NAME, 3, 100) == ReadResult(3, b"", True, False)
    # Data there already: wait changes nothing.
    assert await store.read(NAME, 1, 100, wait=WAIT) == ReadResult(1, b"bc", True, False)


async def test_sealed_while_parked(store: SegmentStore) -> None:
    await store.create_segment(NAME)
    await store.append(NAME, b"abc")
    at_end = await _parked(store, 3)
    beyond = await _parked(store, 5)
    await store.seal(NAME)
    # Sealed exactly at the read's offset: the empty end-of-segment result.
    assert await asyncio.wait_for(at_end, 2) == ReadResult(3, b"", False, True)
    # Sealed below it: the offset can never exist.
    with pytest.raises(InvalidOffset):
        await asyncio.wait_for(beyond, 2)
    # A sealed segment never parks a read.
    assert await store.read(NAME, 3, 10, wait=WAIT) == ReadResult(3, b"", False, True)
    assert await store.read(NAME, 0, 10, wait=WAIT) == ReadResult(0, b"abc", False, True)
    with pytest.raises(InvalidOffset):
        await store.read(NAME, 4, 10, wait=WAIT)


async def test_truncated_while_parked_keeps_waiting(store: SegmentStore) -> None:
    """Truncating up to the end does not cancel a read parked there: it still gets the
    next data (the offset is still readable)."""
    await store.create_segment(NAME)
    await store.append(NAME, b"abcdef")
    task = await _parked(store, 6)
    await store.truncate(NAME, 6)
    await asyncio.sleep(0.02)
    assert not task.done()
    await store.append(NAME, b"gh")
    assert await asyncio.wait_for(task, 2) == ReadResult(6, b"gh", True, False)
    with pytest.raises(SegmentTruncated):
        await store.read(NAME, 5, 10, wait=WAIT)


async def test_deleted_while_parked_answers_empty_at_tail(store: SegmentStore) -> None:
    await store.create_segment(NAME)
    await store.append(NAME, b"abc")
    task = await _parked(store, 3)
    await store.delete(NAME)
    assert await asyncio.wait_for(task, 2) == ReadResult(3, b"", True, False)
    # Deleted and created again under the same name: still the read of the old segment.
    await store.create_segment(NAME)
    task = await _parked(store, 0)
    await store.delete(NAME)
    await store.create_segment(NAME)
    await store.append(NAME, b"new")
    assert await asyncio.wait_for(task, 2) == ReadResult(0, b"", True, False)
    with pytest.raises(SegmentNotFound):
        await store.read("missing", 0, 10, wait=WAIT)


async def test_closing_the_store_answers_parked_reads(tmp_path: Path) -> None:
    s = await SegmentStore.open(small_config(tmp_path))
    await s.create_segment(NAME)
    task = asyncio.create_task(s.read(NAME, 0, 10, wait=WAIT))
    await asyncio.sleep(0.02)
    await s.close()
    assert await asyncio.wait_for(task, 2) == ReadResult(0, b"", True, False)


async def _evicted_store(tmp_path: Path) -> tuple[SegmentStore, bytes]:
    """A store whose segment starts only in chunk files (flushed and evicted)."""
    cfg = small_config(tmp_path, read_cache_bytes=8 * 1024, flush_bytes=4 * 1024)
    s = await SegmentStore.open(cfg)
    await s.create_segment(NAME)
    data = bytes(range(256)) * 200
    for i in range(0, len(data), 5120):
        await s.append(NAME, data[i : i + 5120])
    # Quiet: evicted, and nothing left to flush (a later flush would evict more, racing the
    # caller's reads).
    for _ in range(200):
        if s.try_read(NAME, 0, 100) is None and s.stats()["unflushed_bytes"] == 0:
            break
        await asyncio.sleep(0.02)
    assert s.try_read(NAME, 0, 100) is None
    return s, data


async def test_the_disk_guard_is_entered_once_around_a_chunk_read(tmp_path: Path) -> None:
    s, data = await _evicted_store(tmp_path)
    try:
        guard = Guard()
        s.set_fault_hook(guard.fault_hook)
        r = await s.read(NAME, 0, 1000, wait=WAIT, disk_guard=guard)
        assert bytes(r.data) == data[:1000] and not r.at_tail
        assert guard.events == ["enter", "chunk.read", "exit"]
        assert guard.sizes == [1000]
        # Near the end: the guard is told the most bytes the result can carry.
        guard.events.clear()
        tail_start = len(data) - int(s.stats()["cache_bytes"])
        r = await s.read(NAME, tail_start - 10, 1 << 20, disk_guard=guard)
        assert bytes(r.data) == data[tail_start - 10 :] and r.at_tail
        assert guard.sizes[-1] == len(data) - (tail_start - 10)
        assert guard.events == ["enter", "chunk.read", "exit"]
        # A cache hit never calls it.
        guard.events.clear()
        r = await s.read(NAME, len(data) - 100, 100, wait=WAIT, disk_guard=guard)
        assert bytes(r.data) == data[-100:] and guard.events == []
    finally:
        await s.close()


async def test_truncate_or_delete_while_the_guard_waits_wins(tmp_path: Path) -> None:
    """The guard may wait (the server's output is full): storage looks at the segment again
    inside it, so a truncate or delete that ran meanwhile is what the read reports."""
    s, _ = await _evicted_store(tmp_path)
    try:
        guard = Guard()
        guard.during = asyncio.Event()
        s.set_fault_hook(guard.fault_hook)
        task = asyncio.create_task(s.read(NAME, 0, 1000, disk_guard=guard))
        await asyncio.sleep(0.02)
        assert guard.events == ["enter"]
        await s.truncate(NAME, 2000)
        guard.during.set()
        with pytest.raises(SegmentTruncated):
            await asyncio.wait_for(task, 2)
        assert guard.events == ["enter", "exit"]  # no chunk file touched

        guard.during = asyncio.Event()
        task = asyncio.create_task(s.read(NAME, 2000, 1000, disk_guard=guard))
        await asyncio.sleep(0.02)
        await s.delete(NAME)
        guard.during.set()
        with pytest.raises(SegmentNotFound):
            await asyncio.wait_for(task, 2)
    finally:
        await s.close()
