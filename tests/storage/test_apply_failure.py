"""An error while a durable batch is applied stops its container (commit.py's header).

That batch is in the log and the next one may be on its way behind it, so it must never be
treated as a failed write (which rolled sequence numbers back: two batches in flight,
numbers given twice, acknowledged appends reported lost, a log recovery refuses). Each test
injects one error at one place of the commit path, with a successor in flight where the
place allows, and checks: what was acknowledged stays acknowledged, nothing is failed as
"log write failed", no sequence number is in the log twice, every later call gets the
stop's retriable error at once, close() ends within a bound, and a restart (and a crash
copy taken at the stop) recovers every acknowledged append.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from segmentstore.storage import (
    AttributeUpdate,
    AttributeUpdateType,
    SegmentStore,
    StorageUnavailable,
    StoreConfig,
)
from segmentstore.storage import log_thread as lt_mod
from segmentstore.storage import records as R
from segmentstore.storage.api import AppendResult
from segmentstore.storage.container import SegmentContainer
from segmentstore.storage.crc import crc32c
from segmentstore.storage.operations import UpdateAttributes
from segmentstore.storage.stages import StageTimes
from segmentstore.storage.wal import HEADER_SIZE, WalWriter, list_log_files

from .conftest import small_config

pytestmark = pytest.mark.timeout(60)

WAIT = 10.0  # seconds: far above any step here; a lost wake-up fails, not hangs
W = uuid.UUID(int=7)
ATTR = uuid.UUID(int=99)
STOPPED = "stopped after an internal error"


class Boom(RuntimeError):
    """The injected internal error."""


class Gates:
    """A fault hook that holds the log thread at its n-th batch write until ``open(n)``;
    ``fail`` holds write numbers that then fail as a full disk would."""

    def __init__(self, n: int) -> None:
        self.gates = [threading.Event() for _ in range(n)]
        self.fail: set[int] = set()
        self.writes = 0

    def __call__(self, op: str) -> None:
        if op != "wal.write":
            return
        i = self.writes
        self.writes += 1
        if i < len(self.gates):
            self.gates[i].wait(WAIT)
        if i in self.fail:
            raise OSError(errno.ENOSPC, "No space left on device (injected)")

    def open(self, i: int) -> None:
        self.gates[i].set()


class Once:
    """Raises Boom on its first call after ``arm()``; otherwise calls through."""

    def __init__(self, through: Callable[..., Any]) -> None:
        self.through = through
        self.armed = False
        self.raised = 0

    def arm(self) -> None:
        self.armed = True

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        """Set on a class, it is a method: called with the instance first."""
        return self if obj is None else functools.partial(self, obj)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.armed:
            self.armed = False
            self.raised += 1
            raise Boom("injected")
        return self.through(*args, **kwargs)


async def until(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not cond():
        assert time.monotonic() < deadline, f"{what} did not happen"
        await asyncio.sleep(0.001)


def log_seqs(data_dir: Path) -> list[int]:
    """Sequence numbers of the intact records in container 0's log files, in file order."""
    seqs: list[int] = []
    for info in list_log_files(data_dir / "container-0000" / "log"):
        buf = info.path.read_bytes()
        pos = HEADER_SIZE
        while pos + R.PREFIX_SIZE <= len(buf):
            crc, size, seq, _ = R.PREFIX.unpack_from(buf, pos)
            end = pos + 8 + size
            if size < R.SEQ_TYPE_SIZE or end > len(buf) or crc32c(buf[pos + 4 : end]) != crc:
                break
            seqs.append(seq)
            pos = end
    return seqs


def assert_one_run(seqs: list[int]) -> None:
    """No number twice, none skipped: what recovery replays without stopping early."""
    assert seqs, "no records in the log"
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs


def assert_stop_error(fut: asyncio.Future[Any]) -> None:
    assert fut.done(), "never answered"
    exc = fut.exception()
    assert isinstance(exc, StorageUnavailable), exc
    assert exc.retriable
    assert STOPPED in str(exc) and "restart" in str(exc), exc
    assert "log write failed" not in str(exc)


def payloads() -> list[bytes]:
    return [b"pre;"] + [f"p{i}-".encode() * (i + 1) for i in range(6)]


async def check_recovered(
    cfg: StoreConfig,
    acked: list[bytes],
    durable: list[bytes],
    caplog: pytest.LogCaptureFixture | None = None,
) -> None:
    """Open ``cfg``'s directory: it starts, holds exactly the ``durable`` appends (every
    acknowledged one among them, where its ack said) and takes new appends. With
    ``caplog``: recovery found nothing wrong (no record skipped as not fitting the state a
    checkpoint left, which a checkpoint of half a batch would cause)."""
    assert_one_run(log_seqs(cfg.data_dir))
    if caplog is not None:
        caplog.clear()
    async with await SegmentStore.open(cfg) as s:
        if caplog is not None:
            problems = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
            assert not problems, problems
        data = bytes((await s.read("s", 0, 1 << 16)).data)
        assert data == b"".join(durable)
        for p in acked:
            assert p in durable
        r = await s.append("s", b"after", writer_id=W, event_number=100)
        assert r.new_length == len(data) + 5
        assert s.stats()["stopped"] == 0


# Where the error is raised, and what of batch 1 (two appends, an attribute update, one
# append) is acknowledged, and whether batch 2 is on its way when the container stops.
CASES = {
    # An op's own apply, in the middle of batch 1: the appends before it stay acknowledged.
    "op_apply": (2, True),
    # The on_commit hook, after batch 1 was applied: all of it stays acknowledged.
    "on_commit": (4, True),
    # Before batch 2 is sent (stage timing): nothing of batch 1 is applied.
    "observe_commit": (0, False),
    # Handing batch 2 to the log thread: batch 2 never leaves the queue.
    "send": (0, False),
}


@pytest.mark.parametrize(
    ("where", "successor_fails"),
    [(where, False) for where in CASES]
    # The batch on its way when the container stopped then fails to be written.
    + [(where, True) for where, (_, on_its_way) in CASES.items() if on_its_way],
)
async def test_an_error_applying_a_durable_batch_stops_the_container(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    crash_copy: Callable[[Path], Path],
    where: str,
    successor_fails: bool,
) -> None:
    acked_in_batch1, successor_sent = CASES[where]
    caplog.set_level(logging.WARNING, "segmentstore.storage")
    cfg = small_config(tmp_path / "data", checkpoint_log_bytes=1 << 40)
    p = payloads()
    s = await SegmentStore.open(cfg)
    c: SegmentContainer = s._containers[0]
    await s.create_segment("s")
    assert (await s.append("s", p[0], writer_id=W, event_number=0)).new_length == len(p[0])
    ends = [len(b"".join(p[: i + 1])) for i in range(len(p))]

    once: Once
    if where == "op_apply":
        once = Once(UpdateAttributes.apply)
        monkeypatch.setattr(UpdateAttributes, "apply", once)
    elif where == "on_commit":
        once = Once(lambda records, seconds: None)
        s.on_commit = once
    elif where == "observe_commit":
        once = Once(StageTimes.observe_commit)
        monkeypatch.setattr(StageTimes, "observe_commit", once)
    else:
        once = Once(c._log_thread.run)
        monkeypatch.setattr(c._log_thread, "run", once)

    gates = Gates(3)
    if successor_fails:
        gates.fail.add(2)
    s.set_fault_hook(gates)
    # Batch 0 is held at the log thread ...
    f0 = s.append("s", p[1], writer_id=W, event_number=1)
    await until(lambda: gates.writes == 1, "batch 0 at the log thread")
    # ... while batch 1 queues behind it: two appends, an attribute update, one append.
    f1 = s.append("s", p[2], writer_id=W, event_number=2)
    f2 = s.append("s", p[3], writer_id=W, event_number=3)
    upd = asyncio.ensure_future(
        s.update_attributes("s", [AttributeUpdate(ATTR, AttributeUpdateType.REPLACE, 5)])
    )
    await until(lambda: len(c._ops) == 3, "the attribute update queued")
    f3 = s.append("s", p[4], writer_id=W, event_number=4)
    gates.open(0)
    assert (await asyncio.wait_for(f0, WAIT)).new_length == ends[1]
    await until(lambda: gates.writes == 2, "batch 1 at the log thread")
    # Batch 2 queues behind batch 1; a tail reader waits past everything.
    f4 = s.append("s", p[5], writer_id=W, event_number=5)
    f5 = s.append("s", p[6], writer_id=W, event_number=6)
    tail = asyncio.ensure_future(s.read("s", ends[-1], 100, wait=30))
    await asyncio.sleep(0)
    once.arm()
    gates.open(1)  # batch 1 is durable: batch 2 goes out (or not), batch 1 is applied
    batch1: list[asyncio.Future[Any]] = [f1, f2, upd, f3]
    await until(lambda: all(f.done() for f in batch1), "batch 1 answered")
    assert once.raised == 1

    # What was acknowledged stays acknowledged; the rest fail with the stop's error, never
    # "log write failed" (the batch is in the log).
    for i, fut in enumerate(batch1):
        if i < acked_in_batch1:
            assert fut.exception() is None
        else:
            assert_stop_error(fut)
    if acked_in_batch1:
        assert f1.result() == AppendResult(ends[2])
    if successor_sent:
        assert not f4.done() and not f5.done()  # on their way: not failed as unwritten
        assert c._in_log is not None
        await asyncio.sleep(0.05)
        assert gates.writes == 3  # nothing else was sent meanwhile
    else:
        assert_stop_error(f4)
        assert_stop_error(f5)
        assert c._in_log is None
    # One ERROR with the traceback.
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    assert errors[0].exc_info is not None and isinstance(errors[0].exc_info[1], Boom)
    assert s.stats()["stopped"] == 1
    # The parked tail read gets the error instead of an empty answer.
    with pytest.raises(StorageUnavailable, match=STOPPED):
        await asyncio.wait_for(tail, WAIT)
    # Every later call is refused at once, with the same retriable error.
    later = s.append("s", b"later", writer_id=W, event_number=7)
    assert later.done()
    assert_stop_error(later)
    with pytest.raises(StorageUnavailable, match=STOPPED):
        await s.create_segment("t")
    with pytest.raises(StorageUnavailable, match=STOPPED):
        await s.seal("s")
    with pytest.raises(StorageUnavailable, match=STOPPED):
        await asyncio.wait_for(s.read("s", c._segments["s"].length, 10, wait=30), WAIT)
    # Reads of what was applied still work.
    got = await s.read("s", 0, ends[1])
    assert bytes(got.data) == b"".join(p[:2])
    appends_of_batch1 = {0: p[2], 1: p[3], 3: p[4]}  # 2 is the attribute update
    acked = [p[0], p[1]] + [v for i, v in appends_of_batch1.items() if i < acked_in_batch1]

    # A crash now: batch 1 is in the log, batch 2 is not (held at the log thread).
    copy = crash_copy(cfg.data_dir)
    # close() while batch 2 is still on its way: it waits for it, then ends.
    closing = asyncio.ensure_future(s.close())
    await asyncio.sleep(0.05)
    if successor_sent:
        assert not closing.done()
        gates.open(2)
    await asyncio.wait_for(closing, WAIT)
    if successor_sent:
        assert_stop_error(f4)
        assert_stop_error(f5)
    assert s.pending_bytes == 0  # every byte given back once, none twice
    assert not [r for r in caplog.records if "log write failed" in r.getMessage()]
    once.armed = False

    through_batch1 = p[:5]
    await check_recovered(small_config(copy), acked, through_batch1, caplog)
    durable = p if successor_sent and not successor_fails else through_batch1
    await check_recovered(cfg, acked, durable, caplog)
    async with await SegmentStore.open(cfg) as s2:
        assert s2.get_attribute("s", ATTR) == 5  # the update is in the log, so it is back


@pytest.mark.parametrize("sender", ["send_queued", "writer_loop"])
async def test_an_error_sending_a_batch_stops_the_container(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sender: str
) -> None:
    """The two other senders (``_send_queued`` with no batch on its way, the writer task
    over the memory bound): a failed hand-over fails the batch instead of losing it."""
    cfg = small_config(tmp_path / "data", checkpoint_log_bytes=1 << 40)
    s = await SegmentStore.open(cfg)
    c: SegmentContainer = s._containers[0]
    await s.create_segment("s")
    await s.append("s", b"first")
    once = Once(c._log_thread.run)
    monkeypatch.setattr(c._log_thread, "run", once)
    once.arm()
    bound = c._max_unflushed
    if sender == "writer_loop":
        c._max_unflushed = -1  # _send_queued wakes the writer task instead of sending
    fut = s.append("s", b"second")
    await asyncio.sleep(0)  # _send_queued ran
    c._max_unflushed = bound  # so the writer task sends at once
    await asyncio.wait({fut}, timeout=WAIT)
    assert_stop_error(fut)
    assert once.raised == 1
    assert s.pending_bytes == 0
    assert_stop_error(s.append("s", b"third"))
    await asyncio.wait_for(s.close(), WAIT)
    await check_recovered(cfg, [b"first"], [b"first"])


native_only = pytest.mark.skipif(
    lt_mod._dsync is None or not hasattr(os, "RWF_DSYNC") or not hasattr(os, "eventfd"),
    reason="native lane not built (no C compiler) or not Linux",
)


@native_only
async def test_an_error_taking_a_native_write_back_stops_the_container(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``_written_native`` (the native lane's ``then``) raising: log_thread would only log it
    and leave the batch on its way for ever (close() hung); now the container stops."""
    monkeypatch.setenv("SEGMENTSTORE_NATIVE_LOG", "1")
    cfg = small_config(tmp_path / "data", checkpoint_log_bytes=1 << 40, log_file_bytes=1 << 20)
    s = await SegmentStore.open(cfg)
    c: SegmentContainer = s._containers[0]
    await s.create_segment("s")
    await s.append("s", b"first")
    once = Once(WalWriter.dsync_written)
    monkeypatch.setattr(WalWriter, "dsync_written", once)
    once.arm()
    fut = s.append("s", b"second")
    await asyncio.wait({fut}, timeout=WAIT)
    assert once.raised == 1, "the batch did not take the native lane"
    assert_stop_error(fut)
    assert c._in_log is None
    assert s.pending_bytes == 0
    await asyncio.wait_for(s.close(), WAIT)
    # The batch was written: a restart recovers it.
    await check_recovered(cfg, [b"first"], [b"first", b"second"])
