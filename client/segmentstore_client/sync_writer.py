"""The blocking event writer: events cross to the loop thread in batches, not one by one.

Contract: ``write`` appends to a local run under a lock and wakes the loop only when the
queue was empty, so a thread writing in a loop hands over thousands of events per
wake-up; ``write`` blocks when the writer holds its byte bound (backpressure). A run is
events handed to the async writer in one call (all unnumbered, or consecutively
numbered, or one conditional append). An event over the wire's maximum fails at the
call and nothing else is lost; after the client closed, calls raise
:class:`ClientClosed` and acks still pending fail with it.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterable
from typing import Final

from .errors import ClientClosed, Timeout, WriterClosed
from .pool import within
from .protocol.events import MAX_EVENT_SIZE
from .sync_loop import LoopThread
from .writer import Ack, EventWriter, event_too_large

_ONLY_BYTES: Final = frozenset({bytes})


def _copy(data: object) -> bytes:
    """An event as immutable bytes (a copy of a mutable buffer the caller may reuse)."""
    if type(data) is bytes:
        return data
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"an event is bytes, not {type(data).__name__}")


class SyncAck:
    """Blocking acknowledgement of :meth:`SyncEventWriter.write` (shared by the events
    handed over together).

    Example::

        ack = writer.write(b"x")
        ack.wait()          # durable now (raises the writer's error otherwise)
    """

    __slots__ = ("_error", "_event")

    def __init__(self) -> None:
        self._event = threading.Event()
        self._error: BaseException | None = None

    def wait(self, timeout: float | None = None) -> None:
        """Block until the events are durable; raise their error, or :class:`Timeout`.

        Example::

            writer.write(b"x").wait(timeout=5)
        """
        if not self._event.wait(timeout):
            raise Timeout(f"event not acknowledged within {timeout:g}s")
        if self._error is not None:
            raise self._error

    def done(self) -> bool:
        """True once durable or failed. Example: ``if ack.done(): ack.wait(0)``"""
        return self._event.is_set()

    def _settle(self, error: BaseException | None) -> None:
        self._error = error
        self._event.set()

    def _follow(self, ack: Ack) -> None:
        def done(fut: asyncio.Future[None]) -> None:
            self._settle(None if fut.cancelled() else fut.exception())

        ack._fut.add_done_callback(done)

    def __repr__(self) -> str:
        if not self.done():
            return "<SyncAck pending>"
        return "<SyncAck durable>" if self._error is None else f"<SyncAck failed: {self._error!r}>"


class _Run:
    """Events handed over together: auto-numbered, numbered from ``first``, or one
    conditional append."""

    __slots__ = ("ack", "expected_offset", "first", "payloads", "size")

    def __init__(self, first: int | None, expected_offset: int | None = None) -> None:
        self.first = first
        self.expected_offset = expected_offset
        self.payloads: list[bytes] = []
        self.size = 0  # record bytes (8-byte header + payload) of the payloads
        self.ack = SyncAck()


class SyncEventWriter:
    """Blocking :class:`EventWriter`; get one with :meth:`SyncClient.writer`.

    Example::

        with client.writer("orders/0", writer_id="job-7") as w:
            for row in rows:
                w.write(row)
    """

    def __init__(self, lt: LoopThread, writer: EventWriter) -> None:
        self._lt = lt
        self._writer = writer
        self._lock = threading.Lock()
        self._space = threading.Condition(self._lock)
        self._runs: list[_Run] = []
        self._bytes = 0
        self._max = writer._max_buffered
        self._kicked = False
        self._drain_lock: asyncio.Lock | None = None
        self._error: BaseException | None = None
        self._closed = False

    @property
    def writer_id(self) -> uuid.UUID:
        """The writer's id (see :meth:`Client.writer`). Example: ``print(w.writer_id)``"""
        return self._writer.writer_id

    @property
    def segment(self) -> str:
        """The segment written to. Example: ``print(w.segment)``"""
        return self._writer.segment

    @property
    def acked_event_number(self) -> int:
        """Highest event number the server has made durable.

        Example: ``w.flush(); assert w.acked_event_number == w_count``
        """
        return self._writer.acked_event_number

    def __repr__(self) -> str:
        return f"<SyncEventWriter {self._writer!r}>"

    def start(self) -> SyncEventWriter:
        """Connect and set up the append session now (``write`` does it lazily).

        Example::

            w = client.writer("orders/0").start()
        """
        self._lt.run(self._writer.start())
        return self

    def write(
        self,
        data: bytes,
        *,
        event_number: int | None = None,
        expected_offset: int | None = None,
    ) -> SyncAck:
        """Queue one event (see :meth:`EventWriter.write`); blocks only when the writer
        holds its byte bound. Returns a :class:`SyncAck`.

        Example::

            w.write(b'{"id": 1}')
            w.write(b"next", event_number=42)
        """
        if type(data) is not bytes:
            data = _copy(data)
        if len(data) > MAX_EVENT_SIZE:
            raise event_too_large(len(data))  # at the call: nothing queued, nothing else lost
        size = len(data) + 8
        with self._lock:
            run = self._run_for(event_number, expected_offset)
            run.payloads.append(data)
            return self._queued(run, size)

    def write_many(
        self, events: Iterable[bytes], *, first_event_number: int | None = None
    ) -> SyncAck:
        """Queue many events (see :meth:`EventWriter.write_many`); returns the ack of the
        last one.

        Example::

            w.write_many(payloads, first_event_number=1).wait()
        """
        payloads = list(events)
        if set(map(type, payloads)) - _ONLY_BYTES:
            payloads = [_copy(e) for e in payloads]  # copy mutable buffers
        sizes = list(map(len, payloads))
        if sizes and max(sizes) > MAX_EVENT_SIZE:
            raise event_too_large(max(sizes))  # none of them queued
        size = sum(sizes) + 8 * len(payloads)
        with self._lock:
            run = self._run_for(first_event_number, None)
            run.payloads.extend(payloads)
            return self._queued(run, size)

    def _run_for(self, event_number: int | None, expected_offset: int | None) -> _Run:
        """Under the lock: wait for room, then the run the next event joins.

        A run holds events the loop thread will hand to the async writer in one call: all
        unnumbered, or consecutively numbered from ``run.first``; a conditional append is
        a run of its own.
        """
        if self._error is not None:
            raise self._error
        if self._closed:
            raise WriterClosed(f"writer for {self.segment!r} is closed")
        if self._lt.stopped:
            raise ClientClosed("the client is closed")
        while self._bytes >= self._max and self._runs:
            self._space.wait(1.0)
            if self._error is not None:
                raise self._error
        runs = self._runs
        run = runs[-1] if runs else None
        if expected_offset is not None:
            run = None
        elif event_number is None:
            if run is not None and run.first is None and run.expected_offset is None:
                return run
            run = None
        elif (
            run is not None
            and run.first is not None
            and run.expected_offset is None
            and run.first + len(run.payloads) == event_number
        ):
            return run
        run = _Run(event_number, expected_offset)
        runs.append(run)
        return run

    def _queued(self, run: _Run, size: int) -> SyncAck:
        """Under the lock: account for ``size`` new bytes and wake the loop thread once."""
        run.size += size
        self._bytes += size
        if not self._kicked:
            self._kicked = True
            try:
                self._lt.loop.call_soon_threadsafe(self._kick)
            except RuntimeError:  # the loop closed under us: the client was closed
                self._client_closed_locked()
                raise ClientClosed("the client is closed") from None
        return run.ack

    def flush(self, *, timeout: float | None = None) -> None:
        """Block until every event written so far is durable; :class:`Timeout` after
        ``timeout`` seconds (the events stay queued).

        Example::

            w.flush(timeout=10)
        """
        self._lt.run(self._flush(timeout))

    def close(self) -> None:
        """Flush and close the writer.

        Example::

            w.close()
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._lt.stopped:  # the client's close flushed and closed it already
                if self._error is not None:
                    raise self._error
                return
        try:
            self._lt.run(self._close())
        finally:
            with self._lock:
                self._space.notify_all()

    def abort(self) -> None:
        """Stop at once; unacknowledged events fail (see :meth:`EventWriter.abort`).

        Example: ``w.abort()``
        """
        with self._lock:
            self._closed = True
            self._error = self._error or WriterClosed(f"writer for {self.segment!r} was aborted")
            runs, self._runs = self._runs, []
            self._space.notify_all()
        for run in runs:
            run.ack._settle(self._error)
        self._lt.run(self._abort())

    def __enter__(self) -> SyncEventWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _client_closed(self) -> None:
        """The client closed: fail what never reached the loop, wake blocked writers."""
        with self._lock:
            self._client_closed_locked()

    def _client_closed_locked(self) -> None:
        error = ClientClosed("the client is closed")
        runs, self._runs = self._runs, []
        if runs and self._error is None:
            self._error = error
        self._space.notify_all()
        for run in runs:
            run.ack._settle(error)

    # -- loop side -------------------------------------------------------------------

    def _kick(self) -> None:
        asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        if self._drain_lock is None:
            self._drain_lock = asyncio.Lock()
        async with self._drain_lock:
            while True:
                with self._lock:
                    runs = self._runs
                    if not runs:
                        self._kicked = False
                        return
                    self._runs = []
                for run in runs:
                    try:
                        if run.expected_offset is not None:
                            ack = await self._writer.write(
                                run.payloads[0],
                                event_number=run.first,
                                expected_offset=run.expected_offset,
                            )
                        else:
                            ack = await self._writer.write_many(
                                run.payloads, first_event_number=run.first
                            )
                    except BaseException as e:
                        self._poison(e, run, runs)
                        if not isinstance(e, Exception):
                            raise
                        return
                    run.ack._follow(ack)
                    with self._lock:
                        self._bytes -= run.size
                        self._space.notify_all()

    def _poison(self, error: BaseException, run: _Run, runs: list[_Run]) -> None:
        with self._lock:
            self._error = error
            rest = runs[runs.index(run) :] + self._runs
            self._runs = []
            self._kicked = False
            self._space.notify_all()
        for r in rest:
            r.ack._settle(error)

    async def _flush(self, timeout: float | None) -> None:
        async def flush() -> None:
            await self._drain()
            if self._error is not None:
                raise self._error
            await self._writer.flush()

        await within(timeout, flush())

    async def _close(self) -> None:
        try:
            await self._drain()
        finally:
            await self._writer.close()
        if self._error is not None:
            raise self._error

    async def _abort(self) -> None:
        self._writer.abort()
