"""The log thread (storage/log_thread.py): jobs run in order on one thread, results and
errors come back to the loop through the eventfd, and shutdown closes it."""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from segmentstore.storage import SegmentStore
from segmentstore.storage.log_thread import LogThread

from .conftest import small_config


async def test_jobs_run_in_order_on_one_thread() -> None:
    loop = asyncio.get_running_loop()
    lt = LogThread(loop, "test-log")
    seen: list[tuple[int, str]] = []

    def job(i: int) -> int:
        seen.append((i, threading.current_thread().name))
        return i * 2

    try:
        futs = [lt.run(job, i) for i in range(500)]
        results = await asyncio.wait_for(asyncio.gather(*futs), 10)
    finally:
        lt.shutdown()
    assert results == [i * 2 for i in range(500)]
    assert [i for i, _ in seen] == list(range(500))
    assert {name for _, name in seen} == {"test-log"}


async def test_error_reaches_the_awaiting_task_and_the_thread_goes_on() -> None:
    lt = LogThread(asyncio.get_running_loop(), "test-log")

    def fail() -> None:
        raise OSError(28, "No space left on device")

    try:
        with pytest.raises(OSError, match="No space left"):
            await asyncio.wait_for(lt.run(fail), 10)
        assert await asyncio.wait_for(lt.run(lambda: 7), 10) == 7
    finally:
        lt.shutdown()


async def test_results_arrive_while_the_loop_was_busy() -> None:
    """A job finishing while the loop runs Python is seen at the loop's next poll, and every
    result queued meanwhile is delivered by one drain."""
    lt = LogThread(asyncio.get_running_loop(), "test-log")
    try:
        futs = [lt.run(time.sleep, 0.001) for _ in range(20)]
        deadline = time.monotonic() + 5
        while not lt._jobs.empty() and time.monotonic() < deadline:
            sum(range(1000))  # the loop busy in Python, not polling
        time.sleep(0.05)
        await asyncio.wait_for(asyncio.gather(*futs), 10)
    finally:
        lt.shutdown()


async def test_cancelled_future_is_skipped_and_shutdown_closes_the_fd() -> None:
    lt = LogThread(asyncio.get_running_loop(), "test-log")
    gate = threading.Event()
    first = lt.run(gate.wait, 5)
    second = lt.run(lambda: "ok")
    first.cancel()
    gate.set()
    assert await asyncio.wait_for(second, 10) == "ok"
    fd = lt._rfd
    lt.shutdown()
    lt.shutdown()  # twice is harmless
    with pytest.raises(OSError):
        os.fstat(fd)
    with pytest.raises(RuntimeError, match="shut down"):
        lt.run(lambda: None)


async def test_then_runs_inside_the_drain_before_the_future_completes() -> None:
    lt = LogThread(asyncio.get_running_loop(), "test-log")
    seen: list[tuple[str, object]] = []
    try:
        fut = lt.run(lambda: 5, then=lambda v: seen.append(("then", v)))
        fut.add_done_callback(lambda f: seen.append(("future", f.result())))
        assert await asyncio.wait_for(fut, 10) == 5
        await asyncio.sleep(0)
        assert seen == [("then", 5), ("future", 5)]

        def boom(_: object) -> None:
            raise ValueError("callback broke")

        with pytest.raises(ValueError, match="callback broke"):
            await asyncio.wait_for(lt.run(lambda: 1, then=boom), 10)
        # A failed job skips ``then``; the error still reaches the future.
        called: list[object] = []
        with pytest.raises(ZeroDivisionError):
            await asyncio.wait_for(lt.run(lambda: 1 / 0, then=called.append), 10)
        assert called == []
    finally:
        lt.shutdown()


async def test_a_durable_batch_is_applied_inside_the_eventfd_callback(tmp_path: Path) -> None:
    """The commit loop applies a batch (its append futures complete) in the log thread's
    eventfd callback, not one loop turn later in the writer task: so acks are queued before
    the loop polls its sockets again."""
    s = await SegmentStore.open(small_config(tmp_path))
    try:
        await s.create_segment("a/b")
        lt = s._containers[0]._log_thread
        loop = asyncio.get_running_loop()
        pending: list[asyncio.Future[Any]] = []
        done_in_drain: list[bool] = []

        def spy() -> None:
            before = [f.done() for f in pending]
            lt._drain()
            done_in_drain.extend(
                not was and f.done() for was, f in zip(before, pending, strict=True)
            )

        loop.remove_reader(lt._rfd)
        loop.add_reader(lt._rfd, spy)
        for i in range(5):
            pending[:] = [s.append("a/b", b"x" * (i + 1))]
            await asyncio.wait_for(pending[0], 10)
        loop.remove_reader(lt._rfd)
        loop.add_reader(lt._rfd, lt._drain)
        assert done_in_drain.count(True) == 5, done_in_drain
    finally:
        await s.close()


@pytest.mark.parametrize("native", ["1", "0"])
async def test_the_next_batch_goes_to_the_log_inside_the_eventfd_callback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, native: str
) -> None:
    """What queued while a batch was on its way to disk is sent to the log thread (or its
    native lane) from the callback that applies that batch, not a loop turn later from the
    writer task."""
    monkeypatch.setenv("SEGMENTSTORE_NATIVE_LOG", native)
    s = await SegmentStore.open(small_config(tmp_path))
    try:
        await s.create_segment("a/b")
        lt = s._containers[0]._log_thread
        loop = asyncio.get_running_loop()
        in_drain = [False]
        sent: list[bool] = []  # per log-thread job: submitted inside a drain?
        real_run, real_dsync = lt.run, lt.run_dsync

        def spy_run(*args: Any, **kw: Any) -> Any:
            sent.append(in_drain[0])
            return real_run(*args, **kw)

        def spy_dsync(*args: Any, **kw: Any) -> Any:
            sent.append(in_drain[0])
            return real_dsync(*args, **kw)

        def spy_drain() -> None:
            in_drain[0] = True
            try:
                lt._drain()
            finally:
                in_drain[0] = False

        lt.run = spy_run  # type: ignore[method-assign]
        lt.run_dsync = spy_dsync  # type: ignore[method-assign]
        loop.remove_reader(lt._rfd)
        loop.add_reader(lt._rfd, spy_drain)
        try:
            for _ in range(5):
                sent.clear()
                first = s.append("a/b", b"1" * 10)
                for _ in range(100):
                    if sent:
                        break
                    await asyncio.sleep(0)
                assert sent == [False]  # the writer task sent it (nothing was on its way)
                second = s.append("a/b", b"2" * 10)  # queued while the first is on its way
                await asyncio.wait_for(asyncio.gather(first, second), 10)
                assert sent == [False, True]
        finally:
            loop.remove_reader(lt._rfd)
            loop.add_reader(lt._rfd, lt._drain)
            del lt.run, lt.run_dsync
    finally:
        await s.close()


async def test_failed_runs_in_the_drain_and_the_error_counts_as_retrieved() -> None:
    """``run(..., failed=eb)``: the commit loop learns of a failed batch in the eventfd
    drain, with no task awaiting the future; the future still carries the error, and
    nobody is warned that it was never retrieved."""
    loop = asyncio.get_running_loop()
    lt = LogThread(loop, "test-log")
    seen: list[object] = []
    handler_calls: list[dict[str, Any]] = []
    old = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, ctx: handler_calls.append(ctx))
    try:
        fut = lt.run(lambda: 1 / 0, then=seen.append, failed=seen.append)
        for _ in range(2000):
            if seen:
                break
            await asyncio.sleep(0.001)
        assert len(seen) == 1 and isinstance(seen[0], ZeroDivisionError)
        assert fut.done() and isinstance(fut.exception(), ZeroDivisionError)
        ok = lt.run(lambda: 7, then=seen.append, failed=seen.append)
        assert await asyncio.wait_for(ok, 10) == 7
        assert seen[1:] == [7]
        unawaited = lt.run(lambda: 1 / 0, failed=seen.append)
        for _ in range(2000):
            if unawaited.done():
                break
            await asyncio.sleep(0.001)
        del unawaited, fut
        # the thread's loop variables still hold the last job: move them on
        assert await asyncio.wait_for(lt.run(lambda: 8), 10) == 8
        gc.collect()
        await asyncio.sleep(0)
        assert handler_calls == []  # no "Future exception was never retrieved"
    finally:
        loop.set_exception_handler(old)
        lt.shutdown()
