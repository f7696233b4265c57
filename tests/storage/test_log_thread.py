"""The log thread (storage/log_thread.py): jobs run in order on one thread, results and
errors come back to the loop through the eventfd, and shutdown closes it."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest

from segmentstore.storage.log_thread import LogThread


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
