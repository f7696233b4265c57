"""Who hands a batch to the log thread (commit.py, round 10): with none on its way, the
first record queued schedules one ``call_soon(_send_queued)`` and the writer task is not
stepped; everything queued in that turn goes as one batch. Counted, not timed."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import uuid
from pathlib import Path
from types import FrameType
from typing import Any

from segmentstore.storage import SegmentStore
from segmentstore.storage.commit import CommitLoop
from segmentstore.storage.container import SegmentContainer
from segmentstore.storage.read_cache import ReadCache
from segmentstore.storage.stages import StageTimes, timed_write

from .conftest import small_config


class Calls:
    """Python calls of the given functions made on this thread while profiling."""

    def __init__(self, *fns: Any) -> None:
        self.codes = {fn.__code__: fn.__qualname__ for fn in fns}
        self.count = dict.fromkeys(self.codes.values(), 0)

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            name = self.codes.get(frame.f_code)
            if name is not None:
                self.count[name] += 1


async def _wait_idle(c: SegmentContainer) -> None:
    for _ in range(1000):
        if c._in_log is None and not c._ops and not c._send_soon:
            return
        await asyncio.sleep(0.001)
    raise AssertionError("the container did not go idle")


async def test_a_lone_append_goes_to_the_log_without_a_writer_task_step(tmp_path: Path) -> None:
    s = await SegmentStore.open(small_config(tmp_path))
    try:
        await s.create_segment("a/b")
        c = s._containers[0]
        for _ in range(5):
            await _wait_idle(c)
            calls = Calls(CommitLoop._writer_loop, CommitLoop._send_queued, CommitLoop._send_batch)
            before = c.stats["batches"]
            sys.setprofile(calls)
            try:
                fut = s.append("a/b", b"x" * 100)
                assert c._in_log is None  # not sent inside append: the turn may bring more
                await asyncio.wait_for(fut, 10)
            finally:
                sys.setprofile(None)
            assert c.stats["batches"] == before + 1
            # one call_soon sent it; the writer task (a coroutine: each step is a call of
            # its code) was neither woken to send it nor to see it done
            assert calls.count == {
                "CommitLoop._writer_loop": 0,
                "CommitLoop._send_queued": 1,
                "CommitLoop._send_batch": 1,
            }
    finally:
        await s.close()


async def test_what_one_turn_queues_is_one_batch(tmp_path: Path) -> None:
    s = await SegmentStore.open(small_config(tmp_path))
    try:
        await s.create_segment("a/b")
        await s.create_segment("a/c")
        c = s._containers[0]
        await _wait_idle(c)
        before = c.stats["batches"]
        w = uuid.uuid4()
        futs = [
            s.append("a/b", b"%d" % i, writer_id=w, event_number=i)
            if i % 2
            else s.append("a/c", b"%d" % i)
            for i in range(1, 41)
        ]
        await asyncio.wait_for(asyncio.gather(*futs), 10)
        assert c.stats["batches"] == before + 1
        assert c.stats["last_batch_records"] == 40
        # and the next turn's records go as the next batch, behind it
        futs = [s.append("a/c", b"y") for _ in range(7)]
        await asyncio.wait_for(asyncio.gather(*futs), 10)
        assert c.stats["batches"] == before + 2
        assert c.stats["last_batch_records"] == 7
    finally:
        await s.close()


async def test_records_queued_while_a_batch_is_on_its_way_follow_it(tmp_path: Path) -> None:
    """The eventfd callback of the durable batch sends them; no extra call_soon send."""
    s = await SegmentStore.open(small_config(tmp_path))
    try:
        await s.create_segment("a/b")
        c = s._containers[0]
        await _wait_idle(c)
        before = c.stats["batches"]
        first = s.append("a/b", b"1")
        for _ in range(100):
            if c._in_log is not None:
                break
            await asyncio.sleep(0)
        assert c._in_log is not None
        calls = Calls(CommitLoop._send_queued, CommitLoop._written)
        sys.setprofile(calls)
        try:
            rest = [s.append("a/b", b"2") for _ in range(5)]
            await asyncio.wait_for(asyncio.gather(first, *rest), 10)
        finally:
            sys.setprofile(None)
        assert c.stats["batches"] == before + 2
        assert calls.count == {"CommitLoop._send_queued": 0, "CommitLoop._written": 2}
    finally:
        await s.close()


async def test_close_with_only_a_duplicate_queued_does_not_hang(tmp_path: Path) -> None:
    """A resend of a number still on its way is queued as a Duplicate (no record); closing
    right then must still end the writer task."""
    s = await SegmentStore.open(small_config(tmp_path))
    closed = False
    try:
        await s.create_segment("a/b")
        w = uuid.uuid4()
        first = s.append("a/b", b"1", writer_id=w, event_number=1)
        for _ in range(100):
            if s._containers[0]._in_log is not None:
                break
            await asyncio.sleep(0)
        dup = s.append("a/b", b"1", writer_id=w, event_number=1)
        await asyncio.wait_for(s.close(), 10)
        closed = True
        assert (await first).new_length == 1
        assert (await dup).duplicate
    finally:
        if not closed:
            await s.close()


async def test_a_lone_commit_skips_the_calls_it_does_not_need(tmp_path: Path) -> None:
    """Between the eventfd and the append's future: no ``contextlib.suppress`` (three
    Python calls) in the drain or in the log thread, the four thread stages in one call,
    and the cache's budget is not asked while little is unflushed."""
    watched = {
        fn.__code__: fn.__qualname__
        for fn in (
            contextlib.suppress.__enter__,
            StageTimes.observe,
            StageTimes.observe_commit,
            ReadCache.over_budget,
            timed_write,  # runs on the log thread: shows that thread is profiled
        )
    }
    seen: list[tuple[str, str]] = []  # (thread, function): list.append is atomic

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            name = watched.get(frame.f_code)
            if name is not None:
                seen.append((threading.current_thread().name, name))

    threading.setprofile(profile)  # the store's threads (the log thread) start profiled
    try:
        s = await SegmentStore.open(small_config(tmp_path))
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]
    try:
        await s.create_segment("a/b")
        c = s._containers[0]
        await _wait_idle(c)
        seen.clear()
        sys.setprofile(profile)
        try:
            for _ in range(3):
                await asyncio.wait_for(s.append("a/b", b"x" * 10), 10)
        finally:
            sys.setprofile(None)
        assert c._unflushed < c.config.flush_bytes // 4
        main = threading.main_thread().name
        on_loop = [name for thread, name in seen if thread == main]
        on_others = [name for thread, name in seen if thread != main]
        assert sorted(on_loop) == ["StageTimes.observe"] * 3 + ["StageTimes.observe_commit"] * 3
        assert on_others == ["timed_write"] * 3  # the log thread: no suppress either
    finally:
        await s.close()
