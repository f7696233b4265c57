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
# sockets again). If ``cb`` raises, the error is logged and becomes the future's, and
# ``failed`` runs as if the job had failed: a ``then`` whose job had an effect that cannot be
# undone (the commit loop's ``_written``: the batch is in the log) must not raise.
# ``failed=eb``: ``eb(error)`` runs inside that drain when the job (or ``cb``) failed, and the
# future's error then counts as retrieved: the commit loop learns of a failed batch there,
# with no task awaiting the future (round 10).
#
# The native lane (issue 19, round 8; off by default: it did not win, see the README's
# "Latency, round 8"). Where the C extension ``_dsync`` was built (setup.py) and
# ``SEGMENTSTORE_NATIVE_LOG=1``, a second worker, a pthread that never holds
# the GIL, shares the eventfd: ``run_dsync`` hands it one pwritev(RWF_DSYNC) of a batch, and
# ``_drain`` takes its result. It runs only while this thread has no job (``native_ready``):
# ``run`` while a native job is in flight holds the job back (``_deferred``) until the native
# result is taken, so jobs still touch the log file one at a time and in submission order.
# A native job that fails or comes short runs ``fallback`` on this thread instead, with the
# same future and ``then``: the write is simply done again, whole, at the same offset.
from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
from collections import deque
from collections.abc import Callable, Sequence
from queue import SimpleQueue
from typing import Any, TypeVar

T = TypeVar("T")

_Then = Callable[[Any], None] | None
_Failed = Callable[[BaseException], None] | None
_Job = tuple["asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...], _Then, _Failed]
_Done = tuple["asyncio.Future[Any]", BaseException | None, Any, _Then, _Failed]
Timing = tuple[float, float, float, float]  # sync_s, handoff_in_s, write_s, done_at (stages.py)
# A native job in flight: its future, its byte count, its success callback, its fallback job.
_Native = tuple["asyncio.Future[Timing]", int, Callable[[Timing], None], _Job]

log = logging.getLogger("segmentstore.storage")

_dsync: Any
try:
    from . import _dsync  # type: ignore[attr-defined,no-redef,unused-ignore]
except ImportError:  # pragma: no cover - no C compiler at install time, or not Linux
    _dsync = None
_announced: list[bool] = []


def native_lane_available() -> bool:
    """True when log batches may take the native lane: ``SEGMENTSTORE_NATIVE_LOG=1`` (off by
    default), the extension built, eventfd and RWF_DSYNC there. Logs once why not."""
    if os.environ.get("SEGMENTSTORE_NATIVE_LOG", "0") != "1":
        why = "the native lane is off (SEGMENTSTORE_NATIVE_LOG=1 turns it on)"
    elif _dsync is None:
        why = "the C extension segmentstore.storage._dsync is not built (no C compiler?)"
    elif not hasattr(os, "eventfd") or not hasattr(os, "RWF_DSYNC"):
        why = "no eventfd or RWF_DSYNC on this platform"
    else:
        return True
    if not _announced:
        _announced.append(True)
        log.info("log writes use the Python log thread only: %s", why)
    return False


class LogThread:
    """One worker thread whose results reach the event loop as a kernel event."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, name: str, native: bool | None = None
    ) -> None:
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
        self._queued = 0  # jobs run() accepted whose result the loop has not drained yet
        # The native lane (see the header): its job in flight, jobs held back meanwhile.
        self._lane: Any = None
        if native is None:
            native = native_lane_available()
        if native and _dsync is not None and self._wfd == self._rfd:
            self._lane = _dsync.Lane(self._wfd)
        self._native: _Native | None = None
        self._deferred: list[_Job] = []
        self.native_batches = 0
        self.native_fallbacks = 0
        loop.add_reader(self._rfd, self._drain)
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def run(
        self,
        fn: Callable[..., T],
        *args: Any,
        then: Callable[[T], None] | None = None,
        failed: _Failed = None,
    ) -> asyncio.Future[T]:
        """Queue ``fn(*args)`` for the log thread; the future completes on the loop
        (after ``then(result)``, or ``failed(error)``, run as soon as the loop sees the
        job done)."""
        if self._stopped:
            raise RuntimeError("log thread is shut down")
        fut: asyncio.Future[T] = self._loop.create_future()
        self._queued += 1
        if self._native is not None:
            self._deferred.append((fut, fn, args, then, failed))
        else:
            self._jobs.put((fut, fn, args, then, failed))
        return fut

    @property
    def native(self) -> bool:
        """This thread has a native lane (it may be idle or refused for a batch)."""
        return self._lane is not None

    @property
    def native_ready(self) -> bool:
        """``run_dsync`` may be called: a lane, nothing in flight on it or on this thread."""
        return self._lane is not None and self._native is None and self._queued == 0

    def run_dsync(
        self,
        fd: int,
        pos: int,
        parts: Sequence[bytes | bytearray],
        nbytes: int,
        then_native: Callable[[Timing], None],
        fallback: Callable[..., Timing],
        *args: Any,
        then: Callable[[Timing], None],
        failed: _Failed = None,
    ) -> asyncio.Future[Timing]:
        """``parts`` (``nbytes`` in all) written at ``pos`` of ``fd`` and made durable by the
        native lane; only when ``native_ready``. On success ``then_native(timing)`` runs in
        the drain; on any error or short write ``fallback(*args)`` runs on this thread as if
        it had been ``run(fallback, *args, then=then)``, with the same future."""
        if self._stopped:
            raise RuntimeError("log thread is shut down")
        if not self.native_ready:
            raise RuntimeError("native lane busy or absent")
        fut: asyncio.Future[Timing] = self._loop.create_future()
        self._lane.submit(fd, parts, pos)
        self._native = (fut, nbytes, then_native, (fut, fallback, args, then, failed))
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
            fut, fn, args, then, failed = job
            try:
                item: _Done = (fut, None, fn(*args), then, failed)
            except Exception as exc:
                item = (fut, exc, None, None, failed)
            done.append(item)
            # try/except, not contextlib.suppress: three Python calls fewer per job, run
            # holding the GIL just before the loop is signalled
            try:  # noqa: SIM105
                os.write(wfd, signal)
            except OSError:  # fd closed at shutdown: nobody is waiting
                pass

    def _native_done(self, native: _Native, result: tuple[int, int, int, int, int]) -> None:
        """The lane's job ended: complete it, or hand it to this thread; then release the
        jobs held back behind it (before ``then``, which may send the next batch)."""
        self._native = None
        fut, nbytes, then_native, job = native
        written, err, submit_ns, start_ns, end_ns = result
        ok = err == 0 and written == nbytes
        if not ok:
            self.native_fallbacks += 1
            log.warning(
                "native log lane: %s after %d of %d bytes; the Python log thread writes the batch",
                os.strerror(err) if err else "short write",
                written,
                nbytes,
            )
            self._queued += 1
            self._jobs.put(job)
        for held in self._deferred:
            self._jobs.put(held)
        self._deferred.clear()
        if not ok:
            return
        self.native_batches += 1
        timing = ((end_ns - start_ns) / 1e9, (start_ns - submit_ns) / 1e9, 0.0, end_ns / 1e9)
        _complete(fut, None, timing, then_native, None)

    def _drain(self) -> None:
        try:  # noqa: SIM105 - not contextlib.suppress: this runs before every batch's acks
            os.read(self._rfd, 4096)
        except (BlockingIOError, InterruptedError):
            pass
        native = self._native
        if native is not None:
            result = self._lane.take()
            if result is not None:
                self._native_done(native, result)
        done = self._done
        while done:
            self._queued -= 1
            _complete(*done.popleft())

    def shutdown(self) -> None:
        """Stop the thread after its queued jobs; then stop polling and close the fd."""
        if self._stopped:
            return
        self._stopped = True
        if self._lane is not None:
            self._lane.close()  # waits for a job in flight; its result stays for take()
            self._drain()  # completes it or queues its fallback, and the jobs held back
        self._jobs.put(None)
        self._thread.join()
        self._drain()
        self._loop.remove_reader(self._rfd)
        os.close(self._rfd)
        if self._wfd != self._rfd:
            os.close(self._wfd)


def _complete(
    fut: asyncio.Future[Any], exc: BaseException | None, value: Any, then: _Then, failed: _Failed
) -> None:
    """On the loop: ``then(value)`` when the job succeeded, else ``failed(error)``; then the
    future (whose error ``failed`` has taken: no "never retrieved" warning)."""
    if then is not None and exc is None:
        try:
            then(value)
        except Exception as err:
            log.exception("log thread: completion callback failed")
            exc = err
    if exc is not None and failed is not None:
        try:
            failed(exc)
        except Exception:
            log.exception("log thread: failure callback failed")
    if fut.cancelled():
        return
    if exc is not None:
        fut.set_exception(exc)
        if failed is not None:
            fut.exception()  # reported through ``failed``
    else:
        fut.set_result(value)
