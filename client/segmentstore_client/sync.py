"""The blocking client: the async client's methods, for scripts, notebooks and Spark.

Contract: ``segmentstore_client.sync.connect(...)`` starts a private event loop (uvloop
when installed) in a daemon thread and runs the async client there; every blocking method
hands its coroutine to that loop and waits. All objects are safe to use from several
threads. The writer does not cross threads per event: ``write`` appends to a local batch
under a lock and wakes the loop only when that batch was empty, so a thread writing in a
loop hands over thousands of events per wake-up; ``write`` blocks when the writer holds
its byte bound (backpressure). Readers fetch a batch of events per crossing.

Example::

    from segmentstore_client import sync

    with sync.connect("tcp://127.0.0.1:12345") as client:
        client.create_segment("orders/0", exist_ok=True)
        with client.writer("orders/0") as w:
            w.write(b"hello")
        for event in client.reader("orders/0"):
            print(event.data)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import uuid
import weakref
from collections.abc import Coroutine, Iterable, Iterator
from concurrent.futures import CancelledError
from concurrent.futures import Future as ConcurrentFuture
from typing import Any, Final, TypeVar

from .admin import AttributeId, SegmentInfo, TableInfo
from .client import Client
from .client import connect as async_connect
from .connection import ConnectionOptions, within
from .errors import ClientClosed, SegmentStoreError, Timeout, WriterClosed
from .position import Position
from .protocol.events import MAX_EVENT_SIZE
from .reader import Event, EventReader, ReadChunk
from .table import Key, Table, TableChanges, TableEntry, TableKeyVersion, Value
from .writer import Ack, EventWriter, event_too_large

T = TypeVar("T")

log = logging.getLogger("segmentstore_client")

__all__ = [
    "SyncAck",
    "SyncClient",
    "SyncEventReader",
    "SyncEventWriter",
    "SyncTable",
    "connect",
]


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


class _LoopThread:
    """An event loop running forever in a daemon thread.

    ``stop`` ends it for good: pending tasks are cancelled (their callers get
    :class:`ClientClosed`), the loop stops and closes, and every later ``run`` raises
    :class:`ClientClosed` at once instead of handing a coroutine to a dead loop.
    """

    def __init__(self) -> None:
        self.loop = _new_loop()
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self._stopped = False
        self.thread = threading.Thread(
            target=self._main, name="segmentstore-client-loop", daemon=True
        )
        self.thread.start()
        self._ready.wait()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    @property
    def stopped(self) -> bool:
        """True once :meth:`stop` was called."""
        return self._stopped

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result (at most ``timeout`` seconds,
        then cancel it and raise :class:`Timeout`)."""
        if threading.get_ident() == self.thread.ident:
            coro.close()
            raise RuntimeError("blocking client methods cannot be called from its own loop")
        with self._lock:  # stop() cannot slip in between the check and the hand-over
            if self._stopped:
                coro.close()
                raise ClientClosed("the client is closed")
            fut: ConcurrentFuture[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout)
        except TimeoutError:
            if not fut.done():
                fut.cancel()
                raise Timeout(f"no result within {timeout:g}s") from None
            raise
        except CancelledError:
            raise ClientClosed("the client is closed") from None

    def stop(self) -> None:
        """Cancel what still runs on the loop, stop it and wait for its thread."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        if self.loop.is_running():
            asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop)
        if threading.get_ident() != self.thread.ident:
            self.thread.join(10)

    async def _shutdown(self) -> None:
        me = asyncio.current_task()
        for _ in range(10):  # a cancelled task may start another; bounded
            tasks = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
            if not tasks:
                break
            for t in tasks:
                t.cancel()
            await asyncio.wait(tasks, timeout=1.0)
        self.loop.stop()


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

    def __init__(self, lt: _LoopThread, writer: EventWriter) -> None:
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


class SyncEventReader:
    """Blocking :class:`EventReader`: a plain iterator of :class:`Event`.

    Example::

        reader = client.reader("orders/0")
        for event in reader:
            print(event.data)
        saved = reader.position.to_json()
    """

    def __init__(self, lt: _LoopThread, reader: EventReader) -> None:
        self._lt = lt
        self._reader = reader
        self._lock = threading.Lock()
        self._buffer: list[Event] = []
        self._index = 0
        self._offset = reader.offset

    @property
    def segment(self) -> str:
        """The segment read. Example: ``print(reader.segment)``"""
        return self._reader.segment

    @property
    def position(self) -> Position:
        """Checkpoint after the last event handed out (see :meth:`EventReader.position`).

        Example: ``saved = reader.position.to_json()``
        """
        return Position(self._reader.segment, self._offset)

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        with self._lock:
            if self._index >= len(self._buffer):
                self._buffer = self._lt.run(self._reader.read_batch())
                self._index = 0
                if not self._buffer:
                    raise StopIteration
            event = self._buffer[self._index]
            self._index += 1
            self._offset = event.offset + 8 + len(event.data)
            return event

    def read_batch(self) -> list[Event]:
        """The next events available (at least one), or an empty list at the end.

        Example::

            while batch := reader.read_batch():
                process(batch)
        """
        with self._lock:
            if self._index < len(self._buffer):
                batch = self._buffer[self._index :]
            else:
                batch = self._lt.run(self._reader.read_batch())
            return self._handed_out(batch)

    def poll(self, timeout: float) -> list[Event]:
        """The events available within ``timeout`` seconds, or an empty list if none
        arrived in time or the reader has ended (see :meth:`EventReader.poll`).

        Example::

            while not reader.ended:
                for event in reader.poll(0.5):
                    handle(event)
        """
        with self._lock:
            if self._index < len(self._buffer):
                batch = self._buffer[self._index :]
            else:
                batch = self._lt.run(self._reader.poll(timeout))
            return self._handed_out(batch)

    def next(self, timeout: float | None = None) -> Event | None:
        """The next event, or None once the reader has ended; raises :class:`Timeout`
        if none arrives within ``timeout`` seconds (see :meth:`EventReader.next`).

        Example::

            event = reader.next(timeout=5)
        """
        with self._lock:
            if self._index >= len(self._buffer):
                self._buffer, self._index = [], 0
                event = self._lt.run(self._reader.next(timeout))
                if event is not None:
                    self._offset = event.next_offset
                return event
            event = self._buffer[self._index]
            self._index += 1
            self._offset = event.next_offset
            return event

    @property
    def ended(self) -> bool:
        """True once every event was handed out and no more will come.

        Example: ``while not reader.ended: reader.poll(1)``
        """
        return self._index >= len(self._buffer) and self._reader.ended

    def _handed_out(self, batch: list[Event]) -> list[Event]:
        """Under the lock: ``batch`` goes to the caller; the position moves past it."""
        self._buffer, self._index = [], 0
        if batch:
            self._offset = batch[-1].next_offset
        return batch

    def seek(self, offset: int | Position) -> None:
        """Continue from ``offset`` (see :meth:`EventReader.seek`)."""
        with self._lock:
            self._buffer, self._index = [], 0

            async def seek() -> None:
                self._reader.seek(offset)

            self._lt.run(seek())
            self._offset = self._reader.offset

    def close(self) -> None:
        """Stop prefetching.

        Example::

            reader.close()
        """
        if not self._lt.stopped:  # a closed client closed its readers already
            with contextlib.suppress(ClientClosed):
                self._lt.run(self._reader.close())

    def __enter__(self) -> SyncEventReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SyncTable:
    """Blocking :class:`Table`; get one with :meth:`SyncClient.table`.

    Example::

        t = client.table("app/_tables/settings")
        v = t.put("color", "blue")
        t.get("color").value      # b'blue'
    """

    def __init__(self, lt: _LoopThread, table: Table) -> None:
        self._lt = lt
        self._table = table
        self.name = table.name

    def create(
        self, *, key_length: int = 0, exist_ok: bool = False, timeout: float | None = None
    ) -> bool:
        """See :meth:`Table.create`. Example: ``t.create(exist_ok=True)``."""
        return self._lt.run(
            self._table.create(key_length=key_length, exist_ok=exist_ok, timeout=timeout)
        )

    def delete(
        self, *, must_be_empty: bool = False, missing_ok: bool = False, timeout: float | None = None
    ) -> bool:
        """See :meth:`Table.delete`. Example: ``t.delete(missing_ok=True)``."""
        return self._lt.run(
            self._table.delete(must_be_empty=must_be_empty, missing_ok=missing_ok, timeout=timeout)
        )

    def info(self, *, timeout: float | None = None) -> TableInfo:
        """See :meth:`Table.info`. Example: ``t.info().entry_count``."""
        return self._lt.run(self._table.info(timeout=timeout))

    def get(self, key: Key, *, timeout: float | None = None) -> TableEntry | None:
        """See :meth:`Table.get`. Example: ``t.get("k")``."""
        return self._lt.run(self._table.get(key, timeout=timeout))

    def get_many(
        self, keys: Iterable[Key], *, timeout: float | None = None
    ) -> list[TableEntry | None]:
        """See :meth:`Table.get_many`. Example: ``a, b = t.get_many(["a", "b"])``."""
        return self._lt.run(self._table.get_many(list(keys), timeout=timeout))

    def put(
        self,
        key: Key,
        value: Value,
        *,
        version: int | None = None,
        must_not_exist: bool = False,
        timeout: float | None = None,
    ) -> int:
        """See :meth:`Table.put`. Example: ``v = t.put("k", "v", must_not_exist=True)``."""
        return self._lt.run(
            self._table.put(
                key, value, version=version, must_not_exist=must_not_exist, timeout=timeout
            )
        )

    def put_many(
        self,
        entries: Iterable[tuple[Key, Value] | tuple[Key, Value, int | None]],
        *,
        timeout: float | None = None,
    ) -> list[int]:
        """See :meth:`Table.put_many`. Example: ``t.put_many([("a", "1"), ("b", "2")])``."""
        return self._lt.run(self._table.put_many(list(entries), timeout=timeout))

    def remove(self, key: Key, *, version: int | None = None, timeout: float | None = None) -> None:
        """See :meth:`Table.remove`. Example: ``t.remove("k")``."""
        self._lt.run(self._table.remove(key, version=version, timeout=timeout))

    def remove_many(
        self, keys: Iterable[Key | tuple[Key, int | None]], *, timeout: float | None = None
    ) -> None:
        """See :meth:`Table.remove_many`. Example: ``t.remove_many(["a", "b"])``."""
        self._lt.run(self._table.remove_many(list(keys), timeout=timeout))

    def keys(self, *, batch_size: int = 1000) -> Iterator[TableKeyVersion]:
        """See :meth:`Table.keys`. Example: ``[k.key for k in t.keys()]``."""
        cont: bytes | None = b""
        while cont is not None:
            page, cont = self._lt.run(self._table.keys_page(cont, batch_size=batch_size))
            yield from page

    def items(self, *, batch_size: int = 1000) -> Iterator[TableEntry]:
        """See :meth:`Table.items`. Example: ``{e.key: e.value for e in t.items()}``."""
        cont: bytes | None = b""
        while cont is not None:
            page, cont = self._lt.run(self._table.items_page(cont, batch_size=batch_size))
            yield from page

    def changes(
        self, since: int = 0, *, limit: int = 1000, timeout: float | None = None
    ) -> TableChanges:
        """See :meth:`Table.changes`. Example: ``page = t.changes(saved)``."""
        return self._lt.run(self._table.changes(since, limit=limit, timeout=timeout))


class SyncClient:
    """A blocking client; make one with :func:`connect`. Safe to share across threads.

    Example::

        client = sync.connect("tcp://127.0.0.1:12345")
        client.create_segment("orders/0", exist_ok=True)
        client.close()
    """

    def __init__(self, lt: _LoopThread, client: Client) -> None:
        self._lt = lt
        self._client = client
        self._closed = False
        self._writers: weakref.WeakSet[SyncEventWriter] = weakref.WeakSet()

    @property
    def endpoint(self) -> str:
        """The server's endpoint. Example: ``print(client.endpoint)``"""
        return str(self._client.endpoint)

    @property
    def state(self) -> str:
        """``"connected"``, ``"disconnected"`` or ``"closed"`` (see :attr:`Client.state`).

        Example: ``assert client.state == "connected"``
        """
        return "closed" if self._closed else self._client.state

    def ping(self, *, timeout: float | None = None) -> float:
        """Round trip to the server in seconds (see :meth:`Client.ping`).

        Example: ``print(client.ping(timeout=2))``
        """
        return self._lt.run(self._client.ping(timeout=timeout))

    def __repr__(self) -> str:
        return f"<SyncClient {self._client.endpoint} {self.state}>"

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Flush and close writers, close the connections, stop the loop thread.

        Example::

            client.close()
        """
        if self._closed:
            return
        self._closed = True
        try:
            for w in list(self._writers):  # hand their queued events over, then flush
                try:
                    w.close()
                except SegmentStoreError as e:
                    log.warning("closing %r failed: %s", w, e)
            self._lt.run(self._client.close())
        finally:
            self._lt.stop()
            for w in list(self._writers):
                w._client_closed()

    def writer(
        self,
        segment: str,
        writer_id: str | uuid.UUID | None = None,
        *,
        first_event_number: int | None = None,
        block_size: int = 1024 * 1024,
        linger: float = 0.002,
        max_buffered_bytes: int = 32 * 1024 * 1024,
    ) -> SyncEventWriter:
        """A blocking writer (see :meth:`Client.writer`).

        Example::

            with client.writer("orders/0", writer_id="job-7") as w:
                w.write_many(payloads, first_event_number=1)
        """

        async def make() -> EventWriter:  # on the loop: the client's writer set is not locked
            return self._client.writer(
                segment,
                writer_id,
                first_event_number=first_event_number,
                block_size=block_size,
                linger=linger,
                max_buffered_bytes=max_buffered_bytes,
            )

        w = SyncEventWriter(self._lt, self._lt.run(make()))
        self._writers.add(w)
        return w

    def reader(
        self,
        segment: str,
        offset: int | Position = 0,
        *,
        follow: bool = False,
        read_size: int = 1024 * 1024,
    ) -> SyncEventReader:
        """A blocking reader (see :meth:`Client.reader`).

        Example::

            for event in client.reader("orders/0"):
                print(event.data)
        """
        r = self._client.reader(segment, offset, follow=follow, read_size=read_size)
        return SyncEventReader(self._lt, r)

    def read_bytes(
        self, segment: str, offset: int, length: int, *, timeout: float | None = None
    ) -> ReadChunk:
        """Up to ``length`` raw bytes of ``segment`` from ``offset``, no event parsing
        (see :meth:`Client.read_bytes`).

        Example::

            chunk = client.read_bytes("orders/0", 0, 8)
            kind, length = struct.unpack(">ii", chunk.data)
        """
        return self._lt.run(self._client.read_bytes(segment, offset, length, timeout=timeout))

    def table(self, name: str) -> SyncTable:
        """A blocking table handle (see :meth:`Client.table`).

        Example::

            client.table("app/_tables/t").put("k", "v")
        """
        return SyncTable(self._lt, self._client.table(name))

    # -- admin -----------------------------------------------------------------------

    def create_segment(
        self,
        segment: str,
        *,
        exist_ok: bool = False,
        scale_type: int = 0,
        target_rate: int = 0,
        rollover_size: int = 0,
        timeout: float | None = None,
    ) -> bool:
        """See :meth:`Client.create_segment`. Example: ``client.create_segment("s", exist_ok=True)``."""
        return self._lt.run(
            self._client.create_segment(
                segment,
                exist_ok=exist_ok,
                scale_type=scale_type,
                target_rate=target_rate,
                rollover_size=rollover_size,
                timeout=timeout,
            )
        )

    def segment_info(self, segment: str, *, timeout: float | None = None) -> SegmentInfo:
        """See :meth:`Client.segment_info`. Example: ``client.segment_info("s").length``."""
        return self._lt.run(self._client.segment_info(segment, timeout=timeout))

    def seal(self, segment: str, *, timeout: float | None = None) -> None:
        """See :meth:`Client.seal`. Example: ``client.seal("s")``."""
        self._lt.run(self._client.seal(segment, timeout=timeout))

    def truncate(self, segment: str, offset: int, *, timeout: float | None = None) -> None:
        """See :meth:`Client.truncate`. Example: ``client.truncate("s", 4096)``."""
        self._lt.run(self._client.truncate(segment, offset, timeout=timeout))

    def delete(
        self, segment: str, *, missing_ok: bool = False, timeout: float | None = None
    ) -> bool:
        """See :meth:`Client.delete`. Example: ``client.delete("s", missing_ok=True)``."""
        return self._lt.run(self._client.delete(segment, missing_ok=missing_ok, timeout=timeout))

    def merge(self, target: str, source: str, *, timeout: float | None = None) -> int:
        """See :meth:`Client.merge`. Example: ``client.merge("s", "s#txn")``."""
        return self._lt.run(self._client.merge(target, source, timeout=timeout))

    def merge_with_attribute(
        self,
        target: str,
        source: str,
        attribute_id: AttributeId,
        new_value: int,
        expected: int | None,
        *,
        timeout: float | None = None,
    ) -> int:
        """See :meth:`Client.merge_with_attribute`.
        Example: ``client.merge_with_attribute("s", "s#t", "commit", 2, 1)``."""
        return self._lt.run(
            self._client.merge_with_attribute(
                target, source, attribute_id, new_value, expected, timeout=timeout
            )
        )

    def get_attribute(
        self, segment: str, attribute_id: AttributeId, *, timeout: float | None = None
    ) -> int | None:
        """See :meth:`Client.get_attribute`. Example: ``client.get_attribute("s", "owner")``."""
        return self._lt.run(self._client.get_attribute(segment, attribute_id, timeout=timeout))

    def compare_and_set_attribute(
        self,
        segment: str,
        attribute_id: AttributeId,
        new_value: int | None,
        expected: int | None,
        *,
        timeout: float | None = None,
    ) -> bool:
        """See :meth:`Client.compare_and_set_attribute`.
        Example: ``client.compare_and_set_attribute("s", "owner", 1, None)``."""
        return self._lt.run(
            self._client.compare_and_set_attribute(
                segment, attribute_id, new_value, expected, timeout=timeout
            )
        )

    def last_event_number(
        self, segment: str, writer_id: str | uuid.UUID, *, timeout: float | None = None
    ) -> int | None:
        """See :meth:`Client.last_event_number`. Example: ``client.last_event_number("s", "w")``."""
        return self._lt.run(self._client.last_event_number(segment, writer_id, timeout=timeout))

    def event_count(self, segment: str, *, timeout: float | None = None) -> int:
        """See :meth:`Client.event_count`. Example: ``client.event_count("s")``."""
        return self._lt.run(self._client.event_count(segment, timeout=timeout))

    def create_table(
        self,
        name: str,
        *,
        key_length: int = 0,
        exist_ok: bool = False,
        timeout: float | None = None,
    ) -> bool:
        """See :meth:`Client.create_table`. Example: ``client.create_table("a/_tables/t")``."""
        return self._lt.run(
            self._client.create_table(
                name, key_length=key_length, exist_ok=exist_ok, timeout=timeout
            )
        )

    def delete_table(
        self,
        name: str,
        *,
        must_be_empty: bool = False,
        missing_ok: bool = False,
        timeout: float | None = None,
    ) -> bool:
        """See :meth:`Client.delete_table`. Example: ``client.delete_table("a/_tables/t")``."""
        return self._lt.run(
            self._client.delete_table(
                name, must_be_empty=must_be_empty, missing_ok=missing_ok, timeout=timeout
            )
        )

    def table_info(self, name: str, *, timeout: float | None = None) -> TableInfo:
        """See :meth:`Client.table_info`. Example: ``client.table_info("a/_tables/t")``."""
        return self._lt.run(self._client.table_info(name, timeout=timeout))


def connect(
    endpoint: str = "tcp://127.0.0.1:12345",
    *,
    connect_timeout: float = 10.0,
    request_timeout: float = 30.0,
    reconnect_timeout: float = 60.0,
    keepalive_interval: float = 10.0,
    pool_size: int = 2,
    delegation_token: str = "",
    options: ConnectionOptions | None = None,
) -> SyncClient:
    """A blocking client of the segment store at ``endpoint``; the arguments are those of
    :func:`segmentstore_client.connect`. Opens the first connection now: a server that
    refuses it raises :class:`ConnectFailed` at once.

    Example::

        with sync.connect("tcp://127.0.0.1:12345", reconnect_timeout=20) as client:
            print(client.segment_info("orders/0"))
    """
    lt = _LoopThread()
    try:

        async def make() -> Client:
            client = async_connect(
                endpoint,
                connect_timeout=connect_timeout,
                request_timeout=request_timeout,
                reconnect_timeout=reconnect_timeout,
                keepalive_interval=keepalive_interval,
                pool_size=pool_size,
                delegation_token=delegation_token,
                options=options,
            )
            try:
                return await client.open()
            except BaseException:
                await client.close()
                raise

        client = lt.run(make())
    except BaseException:
        lt.stop()
        raise
    return SyncClient(lt, client)
