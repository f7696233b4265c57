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
# ``run(fn, *args, then=cb)``: ``cb(value)`` runs inside that drain, on the loop, before the
# future completes, when the job succeeded: the commit loop applies a durable batch there,
# one loop turn before a task awaiting the future would run (and before the loop polls its
# sockets again). If ``cb`` raises, the error is logged and becomes the future's.
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import threading
from collections import deque
from collections.abc import Callable
from queue import SimpleQueue
from typing import Any, TypeVar

T = TypeVar("T")

_Then = Callable[[Any], None] | None
_Job = tuple["asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...], _Then]
_Done = tuple["asyncio.Future[Any]", BaseException | None, Any, _Then]

log = logging.getLogger("segmentstore.storage")


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

    def run(
        self, fn: Callable[..., T], *args: Any, then: Callable[[T], None] | None = None
    ) -> asyncio.Future[T]:
        """Queue ``fn(*args)`` for the log thread; the future completes on the loop
        (after ``then(result)``, run as soon as the loop sees the job done)."""
        if self._stopped:
            raise RuntimeError("log thread is shut down")
        fut: asyncio.Future[T] = self._loop.create_future()
        self._jobs.put((fut, fn, args, then))
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
            fut, fn, args, then = job
            try:
                item: _Done = (fut, None, fn(*args), then)
            except Exception as exc:
                item = (fut, exc, None, None)
            done.append(item)
            with contextlib.suppress(OSError):  # fd closed at shutdown: nobody is waiting
                os.write(wfd, signal)

    def _drain(self) -> None:
        with contextlib.suppress(BlockingIOError, InterruptedError):
            os.read(self._rfd, 4096)
        done = self._done
        while done:
            fut, exc, value, then = done.popleft()
            if then is not None:
                try:
                    then(value)
                except Exception as err:
                    log.exception("log thread: completion callback failed")
                    exc = err
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
