# The container's log thread: runs the log's jobs (write a batch, sync, roll, retire files)
# one at a time off the event loop and hands each result back through an eventfd.
#
# Contract. ``run(fn, *args)`` is called on the event loop and returns an asyncio future;
# jobs run in submission order on ONE thread (``WalWriter`` must be driven from one thread
# only). The way back needs no ``concurrent.futures`` future (a lock, a condition and a
# ``call_soon_threadsafe`` per job) and no Python on the thread after the job: the thread
# appends (future, error, value) to a deque and writes the eventfd, which the loop polls
# with its sockets; the loop reads the eventfd, then drains the deque and completes the
# futures (reading first, so an item appended after the drain always finds the eventfd set).
# The way in is a ``queue.SimpleQueue`` (C code: a put wakes the thread without the loop
# giving up the GIL). Where ``os.eventfd`` is missing (not Linux) a pipe does the same job.
# ``shutdown()`` runs on the loop after the last job: it stops the thread and closes the fd.
from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
from collections import deque
from collections.abc import Callable
from queue import SimpleQueue
from typing import Any, TypeVar

T = TypeVar("T")

_Job = tuple["asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]
_Done = tuple["asyncio.Future[Any]", BaseException | None, Any]


class LogThread:
    """One worker thread whose results reach the event loop as a kernel event."""

    def __init__(self, loop: asyncio.AbstractEventLoop, name: str) -> None:
        self._loop = loop
        self._jobs: SimpleQueue[_Job | None] = SimpleQueue()
        self._done: deque[_Done] = deque()
        if hasattr(os, "eventfd"):
            fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
            self._rfd, self._wfd = fd, fd
        else:  # pragma: no cover - not Linux
            self._rfd, self._wfd = os.pipe()
            os.set_blocking(self._rfd, False)
        self._stopped = False
        loop.add_reader(self._rfd, self._drain)
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def run(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Queue ``fn(*args)`` for the log thread; the future completes on the loop."""
        if self._stopped:
            raise RuntimeError("log thread is shut down")
        fut: asyncio.Future[T] = self._loop.create_future()
        self._jobs.put((fut, fn, args))
        return fut

    def _work(self) -> None:
        get = self._jobs.get
        done = self._done
        wfd = self._wfd
        signal = (1).to_bytes(8, sys.byteorder)  # eventfd: counter +1 (a pipe: any 8 bytes)
        while True:
            job = get()
            if job is None:
                return
            fut, fn, args = job
            try:
                item: _Done = (fut, None, fn(*args))
            except Exception as exc:
                item = (fut, exc, None)
            done.append(item)
            with contextlib.suppress(OSError):  # fd closed at shutdown: nobody is waiting
                os.write(wfd, signal)

    def _drain(self) -> None:
        with contextlib.suppress(BlockingIOError, InterruptedError):
            os.read(self._rfd, 4096)
        done = self._done
        while done:
            fut, exc, value = done.popleft()
            if fut.cancelled():
                continue
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(value)

    def shutdown(self) -> None:
        """Stop the thread after its queued jobs; then stop polling and close the fd."""
        if self._stopped:
            return
        self._stopped = True
        self._jobs.put(None)
        self._thread.join()
        self._drain()
        self._loop.remove_reader(self._rfd)
        os.close(self._rfd)
        if self._wfd != self._rfd:
            os.close(self._wfd)
