"""The log's native write lane (storage/_dsync.c, log_thread.py): it writes exactly what the
Python log thread writes, resumes after short writes and past IOV_MAX parts, hands a failed
batch to the Python path (which ends as it always did: durable, or failed and retriable),
and shutdown waits for a job in flight. Every wait is bounded: a lane that never signals
its eventfd fails these tests by timeout instead of hanging the suite."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from segmentstore.storage import SegmentStore, StorageUnavailable, StoreConfig
from segmentstore.storage import log_thread as lt_mod
from segmentstore.storage import wal as wal_mod
from segmentstore.storage.log_thread import LogThread
from segmentstore.storage.wal import _write_all

from .conftest import small_config

_dsync: Any = lt_mod._dsync
pytestmark = [
    pytest.mark.skipif(
        _dsync is None or not hasattr(os, "RWF_DSYNC") or not hasattr(os, "eventfd"),
        reason="native lane not built (no C compiler) or not Linux",
    ),
    # A lane that never signals its eventfd leaves a store's close waiting on it: each test
    # then fails here after 60 s instead of the suite's 300 s.
    pytest.mark.timeout(60),
]


@pytest.fixture(autouse=True)
def _lane_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about the lane: on (it is off by default)."""
    monkeypatch.setenv("SEGMENTSTORE_NATIVE_LOG", "1")


WAIT = 10.0  # seconds: far above any lane job here; a lost eventfd signal fails, not hangs


def _parts(n: int, seed: int = 7) -> list[bytes | bytearray]:
    """n parts of 0-300 bytes, mixed bytes and bytearray, some empty."""
    out: list[bytes | bytearray] = []
    for i in range(n):
        size = (i * 37 + seed) % 301
        chunk = bytes((i + j) % 251 for j in range(size))
        out.append(bytearray(chunk) if i % 3 == 0 else chunk)
    return out


async def _lane_write(
    lt: LogThread, fd: int, pos: int, parts: list[bytes | bytearray]
) -> tuple[float, ...]:
    nbytes = sum(map(len, parts))
    seen: list[tuple[float, ...]] = []

    def fallback() -> tuple[float, float, float, float]:
        raise AssertionError("the lane should not have failed")

    fut = lt.run_dsync(fd, pos, parts, nbytes, seen.append, fallback, then=seen.append)
    timing = await asyncio.wait_for(fut, WAIT)
    assert seen == [timing]
    return timing


@pytest.mark.parametrize("max_write", [0, 1000, 7])
async def test_lane_writes_the_same_bytes_as_the_python_path(
    tmp_path: Path, max_write: int
) -> None:
    """3,000 parts (past IOV_MAX = 1024 per call) at an offset; ``max_write`` makes every
    pwritev come short (1,000 bytes, or 7: a resume inside nearly every part; fewer parts
    then, since every call is a durable write)."""
    parts = _parts(3000 if max_write != 7 else 60)
    loop = asyncio.get_running_loop()
    lt = LogThread(loop, "test-log", native=False)
    lt._lane = _dsync.Lane(lt._wfd, max_write)
    native, python = tmp_path / "native", tmp_path / "python"
    fds = [os.open(p, os.O_RDWR | os.O_CREAT, 0o644) for p in (native, python)]
    try:
        for fd in fds:
            os.pwrite(fd, b"H" * 40, 0)
        sync_s, handoff_in, write_s, done_at = await _lane_write(lt, fds[0], 40, parts)
        assert sync_s > 0 and handoff_in >= 0 and write_s == 0
        # The lane's CLOCK_MONOTONIC is perf_counter's clock (handoff_out = now - done_at).
        assert 0 <= time.perf_counter() - done_at < WAIT
        assert _write_all(fds[1], parts, 40, os.RWF_DSYNC) == sum(map(len, parts))
    finally:
        lt.shutdown()
        for fd in fds:
            os.close(fd)
    assert native.read_bytes() == python.read_bytes()
    assert lt.native_batches == 1 and lt.native_fallbacks == 0
    # Every buffer was released: a bytearray part can be resized again.
    part = next(p for p in parts if isinstance(p, bytearray))
    part.extend(b"!")


async def test_failed_lane_job_runs_the_fallback_with_the_same_future(tmp_path: Path) -> None:
    """A closed fd (EBADF) and a read-only one: the lane reports the error, the job runs on
    the Python thread instead, and jobs queued meanwhile run after it, in order."""
    lt = LogThread(asyncio.get_running_loop(), "test-log", native=True)
    ro = os.open(tmp_path / "ro", os.O_RDONLY | os.O_CREAT, 0o644)
    closed = os.open(tmp_path / "closed", os.O_WRONLY | os.O_CREAT, 0o644)
    os.close(closed)
    order: list[str] = []
    try:
        for fd in (ro, closed):
            order.clear()
            native_then: list[object] = []
            fut = lt.run_dsync(
                fd,
                0,
                [b"abc"],
                3,
                native_then.append,
                lambda: (order.append("fallback"), (0.0, 0.0, 0.0, 0.0))[1],
                then=lambda v: order.append("then"),
            )
            held = lt.run(order.append, "held back")  # queued while the lane has the job
            assert not lt.native_ready
            assert await asyncio.wait_for(fut, WAIT) == (0.0, 0.0, 0.0, 0.0)
            await asyncio.wait_for(held, WAIT)
            # On the thread the fallback ran first; ``then`` runs in the loop's drain.
            assert order.index("fallback") < order.index("held back")
            assert order.count("then") == 1
            assert native_then == []
            assert lt.native_ready
        assert lt.native_fallbacks == 2 and lt.native_batches == 0
    finally:
        lt.shutdown()
        os.close(ro)


async def test_shutdown_waits_for_a_job_in_flight(tmp_path: Path) -> None:
    """shutdown() right after a submit: the job finishes, its ``then`` runs, its future
    completes, and its buffers are released (the bytearray can grow again)."""
    lt = LogThread(asyncio.get_running_loop(), "test-log", native=True)
    big = bytearray(b"z" * (8 << 20))
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o644)
    seen: list[object] = []
    try:
        fut = lt.run_dsync(
            fd, 0, [big, b"tail"], len(big) + 4, seen.append, lambda: None, then=seen.append
        )
        held = lt.run(lambda: "after")
        lt.shutdown()
        assert fut.done() and seen == [fut.result()]
        assert await asyncio.wait_for(held, WAIT) == "after"
    finally:
        os.close(fd)
    assert (tmp_path / "f").stat().st_size == len(big) + 4
    big.extend(b"!")  # BufferError if the lane still held it


def test_lane_dropped_with_a_job_in_flight_releases_its_buffers(tmp_path: Path) -> None:
    efd = os.eventfd(0)
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o644)
    buf = bytearray(b"q" * (4 << 20))
    try:
        lane = _dsync.Lane(efd)
        lane.submit(fd, [buf], 0)
        assert lane.busy
        with pytest.raises(RuntimeError, match="busy"):
            lane.submit(fd, [b"x"], 0)
        with pytest.raises(BufferError):
            buf.extend(b"!")
        del lane  # stops the thread after the job, releases the buffer
        buf.extend(b"!")
        assert os.read(efd, 8) == (1).to_bytes(8, "little")  # the job's signal
    finally:
        os.close(fd)
        os.close(efd)
    assert (tmp_path / "f").stat().st_size == 4 << 20


def test_lane_refuses_bad_input() -> None:
    efd = os.eventfd(0)
    try:
        lane = _dsync.Lane(efd)
        with pytest.raises(TypeError):
            lane.submit(1, [object()], 0)
        with pytest.raises(ValueError, match="negative"):
            lane.submit(1, [b"x"], -1)
        assert not lane.busy and lane.take() is None
        lane.close()
        assert lane.closed
        with pytest.raises(RuntimeError, match="closed"):
            lane.submit(1, [b"x"], 0)
    finally:
        os.close(efd)


async def _appends(s: SegmentStore, n: int) -> dict[str, bytes]:
    await s.create_segment("a")
    await s.create_segment("b")
    expected = {"a": b"", "b": b""}
    for i in range(n):
        name = "ab"[i % 3 == 0]
        payload = bytes([i % 251]) * (i % 97 + (20_000 if i % 50 == 7 else 1))
        expected[name] += payload
        await s.append(name, payload)
    # and some batches of many records at once
    batch = [bytes([i]) * (i + 1) for i in range(200)]
    await asyncio.gather(*(s.append("a", p) for p in batch))
    expected["a"] += b"".join(batch)
    return expected


async def _read_all(s: SegmentStore, name: str) -> bytes:
    got = bytearray()
    while len(got) < s.info(name).length:
        got += (await s.read(name, len(got), 1 << 20)).data
    return bytes(got)


async def test_store_log_files_are_byte_identical_with_and_without_the_lane(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crash_copy: Callable[[Path], Path]
) -> None:
    """The same appends, one at a time, through a store with the lane and one without:
    the same log files, byte for byte (rolls included), and the lane wrote the batches."""
    logs: list[dict[str, bytes]] = []
    for native in ("1", "0"):
        monkeypatch.setenv("SEGMENTSTORE_NATIVE_LOG", native)
        cfg = small_config(tmp_path / native, checkpoint_log_bytes=1 << 40)
        async with await SegmentStore.open(cfg) as s, asyncio.timeout(6 * WAIT):
            expected = await _appends(s, 300)
            stats = s.stats()
            assert stats["native_log_lane"] == (native == "1")
            if native == "1":
                assert stats["native_log_batches"] >= 250
            else:
                assert stats["native_log_batches"] == 0
            copy = crash_copy(cfg.data_dir)
        logs.append(
            {
                p.name: p.read_bytes().rstrip(b"\0")
                for p in (copy / "container-0000" / "log").glob("*.log")
            }
        )
        async with await SegmentStore.open(small_config(copy)) as s:
            for name, data in expected.items():
                assert await _read_all(s, name) == data
    assert len(logs[0]) >= 3  # rolled at least twice (64 KiB files)
    assert logs[0] == logs[1]


@contextlib.asynccontextmanager
async def _store_whose_lane_hits_a_full_disk(cfg: StoreConfig) -> AsyncIterator[SegmentStore]:
    """A store with segment "seg" holding b"good1", whose native lane from now on writes to
    /dev/full (ENOSPC) instead of the log file; the Python path keeps the real file."""
    full = os.open("/dev/full", os.O_WRONLY)
    try:
        async with await SegmentStore.open(cfg) as s:
            await s.create_segment("seg")
            await asyncio.wait_for(s.append("seg", b"good1"), WAIT)
            wal = s._containers[0]._wal
            real = wal.dsync_target
            wal.dsync_target = lambda n: (full, t[1]) if (t := real(n)) else None  # type: ignore[method-assign]
            try:
                yield s
            finally:
                wal.dsync_target = real  # type: ignore[method-assign]
    finally:
        os.close(full)


async def test_a_lane_error_falls_back_and_the_batch_is_durable(
    tmp_path: Path, crash_copy: Callable[[Path], Path]
) -> None:
    """The lane gets ENOSPC: the Python thread writes the same batch to the real file;
    every append is acknowledged and survives a crash."""
    cfg = small_config(tmp_path / "live")
    want = b"good1" + b"".join(b"%03d" % i for i in range(50))
    async with _store_whose_lane_hits_a_full_disk(cfg) as s:
        await asyncio.wait_for(
            asyncio.gather(*(s.append("seg", b"%03d" % i) for i in range(50))), WAIT
        )
        assert await _read_all(s, "seg") == want
        assert s.stats()["native_log_fallbacks"] >= 1
        copy = crash_copy(cfg.data_dir)
    async with await SegmentStore.open(small_config(copy)) as s:
        assert await _read_all(s, "seg") == want


async def test_lane_and_python_path_both_failing_fail_the_batch_retriably(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crash_copy: Callable[[Path], Path]
) -> None:
    """The lane fails (ENOSPC) and so does the Python write (EIO): the batch fails with
    StorageUnavailable as it always did, nothing of it is visible or recovered, and the
    store goes on in a new log file once the disk works again."""
    cfg = small_config(tmp_path / "live")
    async with _store_whose_lane_hits_a_full_disk(cfg) as s:

        def eio(fd: int, bufs: Any, pos: int, flags: int = 0) -> int:
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(wal_mod.os, "pwritev", eio)
        with pytest.raises(StorageUnavailable) as err:
            await asyncio.wait_for(s.append("seg", b"bad"), WAIT)
        assert err.value.retriable
        assert s.info("seg").length == 5
        monkeypatch.undo()
        await asyncio.wait_for(s.append("seg", b"good2"), WAIT)
        assert await _read_all(s, "seg") == b"good1good2"
        copy = crash_copy(cfg.data_dir)
    async with await SegmentStore.open(small_config(copy)) as s:
        assert await _read_all(s, "seg") == b"good1good2"


async def test_a_fault_hook_keeps_batches_on_the_python_thread(tmp_path: Path) -> None:
    """Tests inject I/O failures through ``WalWriter.fault``: with a hook set, no batch
    takes the lane (the hook must see every write)."""
    async with await SegmentStore.open(small_config(tmp_path)) as s, asyncio.timeout(WAIT):
        await s.create_segment("seg")
        await s.append("seg", b"x")
        before = s.stats()["native_log_batches"]
        assert before >= 1
        ops: list[str] = []
        s.set_fault_hook(ops.append)
        for _ in range(5):
            await s.append("seg", b"y")
        assert s.stats()["native_log_batches"] == before
        assert ops.count("wal.write") == 5
