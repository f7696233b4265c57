"""EventWriter: batched, pipelined, exactly-once appends of events to one segment.

Contract: events are numbered per writer id (1, 2, 3, ... unless the caller says
otherwise) and cut into append blocks by size and by a short linger, as Kafka's producer
batches records. A block is one end-only AppendBlockEnd frame, built with one join; its
event numbers are contiguous, so a block is described by (last number, count) and the
server's cumulative DataAppended(N) acknowledges every block whose last number is <= N.
Several blocks are in flight at once; the bytes a writer holds (open batch + unacked
blocks) are bounded, and ``write`` waits when the bound is reached.

Grouping rule: one append never holds events whose numbers are not consecutive. An
event whose number does not follow the previous event's number by exactly one closes
the open batch and starts a new one, so events numbered with gaps (1, 3, 5, ...) each
go to the server as their own append. The server de-duplicates per append (it keeps an
append only if its last number exceeds the last number it holds for the writer id), so
with gapped numbering that check is exact per event even when two writers with the same
id (e.g. speculative attempts of a Spark task) send the same events at the same time.

Exactly-once: the server stores the writer's last event number atomically with the data
(an attribute keyed by the writer id) and returns it in AppendSetup. After every
(re)connect the writer acknowledges locally whatever the server already has (numbers <=
N) and resends the rest in order, with their original numbers. A writer created again
with the same id after a crash does the same for events it is given again with the same
numbers (``write(data, event_number=n)``, ``write_many(events, first_event_number=n)``,
or ``first_event_number=`` on the writer, which numbers its events from there). Numbers
are judged only once the session is set up (the first write waits for AppendSetup): a
number the server already holds is acknowledged without being sent, whatever the writer
accepted before; every other number must exceed the last number accepted for sending.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
import struct
import uuid
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Generator, Iterable
from operator import add
from typing import Any, Final

from .admin import AdminClient
from .connection import Backoff, Connection, next_request_id, within
from .errors import (
    ClientClosed,
    ConnectFailed,
    ConnectionLost,
    EventTooLarge,
    SegmentSealed,
    SegmentStoreError,
    ServerError,
    Timeout,
    WriterClosed,
    WrongHost,
    error_from_reply,
)
from .naming import checked_name, writer_uuid
from .protocol import (
    NULL_ATTRIBUTE_VALUE,
    AppendSetup,
    Command,
    ConditionalAppend,
    ConditionalCheckFailed,
    DataAppended,
    InvalidEventNumber,
    SetupAppend,
    encode,
)
from .protocol.events import MAX_EVENT_SIZE

log = logging.getLogger("segmentstore_client")

_EVENT_HEADER: Final = struct.Struct(">ii")


class _HeaderCache(dict[int, bytes]):
    """Event record headers by payload length: events of a stream mostly repeat a few
    lengths, and a dict lookup from C (``map``) beats packing a struct per event."""

    def __missing__(self, length: int) -> bytes:
        if len(self) >= 65536:
            self.clear()
        header = self[length] = _EVENT_HEADER.pack(0, length)
        return header


_event_header = _HeaderCache().__getitem__
# AppendBlockEnd (type 4): writer uuid, sizeOfWholeEvents i32, data (i32 length + bytes),
# numEvents i32, lastEventNumber i64, requestId i64. Payload = 44 + len(data).
_ABE_HEAD: Final = struct.Struct(">ii16sii")
_ABE_TAIL: Final = struct.Struct(">iqq")
_ABE_HEAD_SIZE: Final = _ABE_HEAD.size  # 28
_ABE_TAIL_SIZE: Final = _ABE_TAIL.size  # 20
_MAX_BLOCK: Final = 4 * 1024 * 1024
_ONLY_BYTES: Final = {bytes}


def event_too_large(size: int) -> EventTooLarge:
    """The error for an event of ``size`` bytes, over the wire's maximum.

    Example: ``raise event_too_large(len(data))``
    """
    return EventTooLarge(f"event of {size} bytes exceeds the {MAX_EVENT_SIZE}-byte maximum")


class Ack:
    """Awaitable acknowledgement of a write: resolves when the server made the event
    durable (awaiting returns None), or raises the error that stopped it.

    Events batched together share one Ack, so waiting costs nothing per event; awaiting
    is shielded, so cancelling one waiter (``asyncio.wait_for``) never cancels the ack.

    Example::

        ack = await writer.write(b"event")
        await ack                    # durable now
        ack.done()                   # True
    """

    __slots__ = ("_fut",)

    def __init__(self, fut: asyncio.Future[None]) -> None:
        self._fut = fut

    def __await__(self) -> Generator[Any, None, None]:
        fut = self._fut
        if not fut.done():
            yield from asyncio.shield(fut).__await__()
        return fut.result()

    def done(self) -> bool:
        """True once the event is durable or failed. Example: ``if ack.done(): ...``"""
        return self._fut.done()

    def exception(self) -> BaseException | None:
        """The error that stopped the event (None if durable); only once ``done()``."""
        return self._fut.exception()

    def add_done_callback(self, fn: Callable[[Ack], object]) -> None:
        """Call ``fn(ack)`` (on the event loop) once the ack is settled.

        Example::

            ack.add_done_callback(lambda a: print("durable" if a.exception() is None else "failed"))
        """
        self._fut.add_done_callback(lambda _f: fn(self))

    def __repr__(self) -> str:
        if not self._fut.done():
            return "<Ack pending>"
        exc = self._fut.exception()
        return "<Ack durable>" if exc is None else f"<Ack failed: {exc!r}>"


class _State(enum.Enum):
    NEW = "new"
    STARTING = "starting"
    OPEN = "open"
    RECONNECTING = "reconnecting"
    FAILED = "failed"
    CLOSED = "closed"


class _Block:
    """A sealed append: contiguous event numbers ``last - count + 1 .. last``."""

    __slots__ = ("conditional", "count", "frame", "fut", "last", "size")

    def __init__(
        self,
        last: int,
        count: int,
        frame: bytes,
        size: int,
        fut: asyncio.Future[None],
        conditional: bool = False,
    ) -> None:
        self.last = last
        self.count = count
        self.frame = frame
        self.size = size
        self.fut = fut
        self.conditional = conditional


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _reject(fut: asyncio.Future[None], error: BaseException) -> None:
    if not fut.done():
        fut.set_exception(error)
        fut.exception()  # mark retrieved: the writer reports errors through flush/close too


class EventWriter:
    """Writes events to one segment; get one with :meth:`Client.writer`.

    Example::

        async with client.writer("orders/0", writer_id="importer-1") as writer:
            for payload in payloads:
                await writer.write(payload)      # returns at once (batched)
        # leaving the block flushed: every event is durable
    """

    def __init__(
        self,
        client: AdminClient,
        segment: str,
        writer_id: str | uuid.UUID | None = None,
        *,
        first_event_number: int | None = None,
        block_size: int = 1024 * 1024,
        linger: float = 0.002,
        max_buffered_bytes: int = 32 * 1024 * 1024,
    ) -> None:
        if not 64 <= block_size <= _MAX_BLOCK:
            raise ValueError(f"block_size must be within 64..{_MAX_BLOCK}")
        if max_buffered_bytes < 2 * block_size:
            raise ValueError("max_buffered_bytes must be at least twice block_size")
        if linger < 0:
            raise ValueError("linger must not be negative")
        if first_event_number is not None and first_event_number < 0:
            raise ValueError("first_event_number must not be negative")
        self._client = client
        self.segment = checked_name(segment)
        self.writer_id = writer_uuid(writer_id)
        self._wid = self.writer_id.bytes
        self._first_event_number = first_event_number
        self._block_size = block_size
        self._linger = linger
        self._max_buffered = max_buffered_bytes
        self._rid = next_request_id()
        self._state = _State.NEW
        self._fast = False
        self._error: BaseException | None = None
        self._conn: Connection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._start_task: asyncio.Future[None] | None = None
        self._reconnect_task: asyncio.Task[None] | None = None
        # the open batch: events numbered _base + 1 .. _base + len(_payloads)
        self._payloads: list[bytes] = []
        # their lengths, while every one came through _write_chunk (write() does not
        # record them: a shorter list means "compute them when sealing")
        self._sizes: list[int] = []
        self._batch_bytes = 0
        self._base = 0
        self._batch_fut: asyncio.Future[None] | None = None
        self._batch_ack: Ack | None = None
        self._flush_handle: asyncio.Handle | None = None
        # sealed blocks: sent and unacknowledged, then sealed and not yet sent
        self._inflight: deque[_Block] = deque()
        self._unsent: deque[_Block] = deque()
        self._held = 0
        self._room = asyncio.Event()
        self._acked = NULL_ATTRIBUTE_VALUE
        self._segment_length = -1
        self._fenced = 0
        self._done_ack: Ack | None = None
        self.reconnects = 0
        """How many times the writer re-established its session after a lost connection."""

    # -- properties ------------------------------------------------------------------

    @property
    def last_event_number(self) -> int:
        """Number of the last event accepted by ``write`` (0 before the first one)."""
        return self._base + len(self._payloads)

    @property
    def acked_event_number(self) -> int:
        """Highest event number the server has made durable (``NULL_ATTRIBUTE_VALUE``,
        i.e. -2**63, while it has none)."""
        return self._acked

    @property
    def segment_length(self) -> int:
        """Segment length after the last acknowledged append (-1 until one is acked).

        Example: ``await writer.flush(); print(writer.segment_length)``
        """
        return self._segment_length

    @property
    def buffered_bytes(self) -> int:
        """Bytes of event records held: open batch plus unacknowledged blocks.

        Example: ``assert writer.buffered_bytes <= max_buffered_bytes + len(last_event) + 8``
        """
        return self._held + self._batch_bytes

    def __repr__(self) -> str:
        return (
            f"<EventWriter {self.segment!r} id={self.writer_id} {self._state.value} "
            f"last={self.last_event_number} acked={self._acked}>"
        )

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> EventWriter:
        """Connect and set up the append session (``write`` does it on first use).

        Example::

            writer = await client.writer("logs/0").start()
        """
        if self._state is _State.NEW:
            self._state = _State.STARTING
            self._loop = asyncio.get_running_loop()
            self._start_task = self._loop.create_future()
            self._done_ack = Ack(self._loop.create_future())
            self._done_ack._fut.set_result(None)
            try:
                conn, last = await self._connect(Backoff(self._client.options))
            except asyncio.CancelledError:
                self._state = _State.NEW  # nothing was set up; a later start may retry
                self._start_task.cancel()
                raise
            except BaseException as e:
                self._fail(e)
                self._start_task.set_exception(e)
                self._start_task.exception()
                raise
            if self._state is not _State.STARTING:  # closed or aborted meanwhile
                conn.remove_route(self._rid)
                error = self._error or WriterClosed(f"writer for {self.segment!r} was closed")
                self._start_task.set_exception(error)
                self._start_task.exception()
                raise error
            if last == NULL_ATTRIBUTE_VALUE or last < 0:
                server_last = 0
            else:
                server_last = last
                self._acked = last
            if self._first_event_number is None:
                self._base = server_last
            else:
                self._base = self._first_event_number - 1
            self._attach(conn)
            self._state = _State.OPEN
            self._update_fast()
            self._start_task.set_result(None)
        elif self._state is _State.STARTING:
            assert self._start_task is not None
            await asyncio.shield(self._start_task)
        self._check()
        return self

    def __await__(self) -> Generator[Any, None, EventWriter]:
        return self.start().__await__()

    async def __aenter__(self) -> EventWriter:
        return await self.start()

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is None:
            await self.close()
            return
        try:
            await self.close()
        except Exception as close_error:
            log.warning("closing %r after an error failed too: %s", self, close_error)

    async def close(self) -> None:
        """Flush (wait until every event is durable), then release the writer.

        Raises the error that stopped the writer, if one did. Example::

            await writer.close()
        """
        if self._state in (_State.CLOSED, _State.NEW):
            self._state = _State.CLOSED
            self._client._forget_writer(self)
            return
        try:
            if self._state is not _State.FAILED:
                await self.flush()
            elif self._error is not None:
                raise self._error
        finally:
            self._shutdown(WriterClosed(f"writer for {self.segment!r} was closed"))
            self._state = _State.CLOSED

    def abort(self) -> None:
        """Stop at once: unacknowledged events fail with :class:`WriterClosed` (the server
        may still have some of them). Being deliberate, it is logged at DEBUG only (an
        unexpected failure of the writer is logged at WARNING).

        Example::

            writer.abort()
        """
        if self._state is not _State.CLOSED:
            error = WriterClosed(f"writer for {self.segment!r} was aborted")
            self._fail(error, deliberate=True)
            self._shutdown(error)
            self._state = _State.CLOSED

    # -- writing ---------------------------------------------------------------------

    async def write(
        self,
        data: bytes,
        *,
        event_number: int | None = None,
        expected_offset: int | None = None,
    ) -> Ack:
        """Queue one event; returns its :class:`Ack` without waiting for the server.

        ``write`` waits only when the writer already holds ``max_buffered_bytes`` (so a
        fast producer cannot outrun the server). Await the ack for durability.

        ``event_number`` sets this event's number. A number the server already holds for
        this writer id (at most its last number from AppendSetup, or acknowledged since)
        is acknowledged at once without sending: that is how a writer created again after
        a crash replays its events without duplicates. Any other number must exceed the
        last number accepted for sending (else ``ValueError``). The first write of a new
        writer waits for the session's setup, so the judgement never guesses. An event
        whose number does not follow the previous one's by exactly one starts a new
        append: events numbered with gaps are never batched together.

        ``expected_offset`` makes a conditional append: it lands only if the segment's
        length equals that offset, else its ack raises :class:`ConditionalCheckFailed`.

        Example::

            ack = await writer.write(b'{"id": 1}')
            await ack
            await writer.write(b"replayed", event_number=1)  # held already: acked at once
        """
        if event_number is not None or expected_offset is not None or not self._fast:
            return await self._write_slow(data, event_number, expected_offset)
        if type(data) is not bytes:
            data = _as_bytes(data)
        n = len(data)
        if n > MAX_EVENT_SIZE:
            raise event_too_large(n)
        payloads = self._payloads
        if not payloads:
            self._begin_batch()
        payloads.append(data)
        size = self._batch_bytes + n + 8
        self._batch_bytes = size
        ack = self._batch_ack
        if size >= self._block_size:
            self._seal()
        if self._held + self._batch_bytes > self._max_buffered:
            await self._wait_room()
        return ack  # type: ignore[return-value]

    async def write_many(
        self, events: Iterable[bytes], *, first_event_number: int | None = None
    ) -> Ack:
        """Queue many events at once (the fastest way to write); returns the Ack of the
        last one, which, acks being cumulative, covers them all.

        ``first_event_number`` numbers the events ``n, n + 1, ...``, judged as
        :meth:`write` judges ``event_number``: those the server already holds are
        acknowledged without sending (replaying the same events after a crash writes
        nothing twice), the rest must be numbered above the last number accepted before.
        The events of one call have consecutive numbers, so they are batched into as few
        appends as ``block_size`` allows (after a gap from the previous call's numbers,
        starting a new append).

        Example::

            ack = await writer.write_many(json.dumps(r).encode() for r in rows)
            await ack
            await writer.write_many(replayed, first_event_number=1)  # a re-created writer
        """
        if self._state is _State.NEW or self._state is _State.STARTING:
            await self.start()
        self._check()
        ack = None
        next_number = first_event_number
        it = iter(events)
        while True:
            chunk = list(itertools.islice(it, 8192))
            if not chunk:
                break
            chunk_ack = await self._write_chunk(chunk, next_number)
            if chunk_ack is not None:
                ack = chunk_ack
            if next_number is not None:
                next_number += len(chunk)
        if ack is None:
            ack = self._batch_ack if self._payloads and self._batch_ack else self._last_ack()
        return ack

    async def flush(self, *, timeout: float | None = None) -> None:
        """Send everything buffered and wait until the server has made it durable;
        :class:`Timeout` after ``timeout`` seconds (the events stay queued).

        Example::

            await writer.write(b"x")
            await writer.flush(timeout=10)
        """
        await within(timeout, self._flush())

    async def _flush(self) -> None:
        if self._state is _State.NEW:
            return
        self._check()
        if self._payloads:
            self._seal()
        last = (
            self._unsent[-1] if self._unsent else (self._inflight[-1] if self._inflight else None)
        )
        if last is not None:
            try:
                await asyncio.shield(last.fut)
            except SegmentStoreError:
                if self._error is None and last.conditional:
                    return  # a refused conditional append is reported by its own ack
                raise
        self._check()

    # -- internals: batching ---------------------------------------------------------

    def _check(self) -> None:
        if self._error is not None:
            raise self._error
        if self._state is _State.CLOSED:
            raise WriterClosed(f"writer for {self.segment!r} is closed")

    def _update_fast(self) -> None:
        self._fast = (
            self._state in (_State.OPEN, _State.RECONNECTING)
            and self._base + len(self._payloads) >= self._acked
        )

    def _last_ack(self) -> Ack:
        if self._unsent:
            return Ack(self._unsent[-1].fut)
        if self._inflight:
            return Ack(self._inflight[-1].fut)
        assert self._done_ack is not None
        return self._done_ack

    def _begin_batch(self) -> None:
        loop = self._loop
        assert loop is not None
        fut = self._batch_fut = loop.create_future()
        self._batch_ack = Ack(fut)
        if self._flush_handle is None:
            if self._inflight or self._unsent:
                self._flush_handle = loop.call_later(self._linger, self._on_linger)
            else:
                self._flush_handle = loop.call_soon(self._on_linger)

    def _on_linger(self) -> None:
        self._flush_handle = None
        if self._payloads and self._state not in (_State.FAILED, _State.CLOSED):
            self._seal()

    async def _wait_room(self) -> None:
        while (self._inflight or self._unsent) and self._held + self._batch_bytes > (
            self._max_buffered
        ):
            if self._error is not None:
                raise self._error
            self._room.clear()
            await self._room.wait()
        if self._error is not None:
            raise self._error

    def _seal(self) -> None:
        """Close the open batch into a block and send it if the session allows."""
        payloads = self._payloads
        count = len(payloads)
        sizes = self._sizes if len(self._sizes) == count else list(map(len, payloads))
        size = self._batch_bytes
        fut = self._batch_fut
        assert fut is not None
        first = self._base + 1
        last = self._base + count
        self._payloads = []
        self._sizes = []
        self._batch_bytes = 0
        self._base = last
        self._batch_fut = None
        self._batch_ack = None
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        if first <= self._acked:  # the server already has some (it told us at setup)
            skip = min(count, self._acked - first + 1)
            payloads = payloads[skip:]
            sizes = sizes[skip:]
            count -= skip
            if not count:
                _resolve(fut)
                return
            size = sum(sizes) + 8 * count
        frame = self._frame(payloads, sizes, size, last)
        block = _Block(last, count, frame, size, fut)
        self._held += size
        if self._state is _State.OPEN and not self._unsent and not self._blocked():
            conn = self._conn
            assert conn is not None
            self._inflight.append(block)
            # An open session means an open connection: its close listener would have
            # moved us to RECONNECTING first.
            conn.write(frame)
        else:
            self._unsent.append(block)

    def _frame(self, payloads: list[bytes], sizes: list[int], size: int, last: int) -> bytes:
        """One AppendBlockEnd frame of ``payloads`` (``sizes`` their lengths, ``size``
        their record bytes), built with one join."""
        count = len(payloads)
        parts: list[bytes] = [b""] * (2 * count + 2)
        parts[0] = _ABE_HEAD.pack(4, 44 + size, self._wid, size, size)
        parts[1 : 2 * count : 2] = map(_event_header, sizes)
        parts[2 : 2 * count + 1 : 2] = payloads
        parts[-1] = _ABE_TAIL.pack(count, last, self._rid)
        return b"".join(parts)

    def _blocked(self) -> bool:
        """Nothing may be sent behind an unresolved conditional append (a Java server
        would fence the writer if that append failed)."""
        return bool(self._inflight) and self._inflight[-1].conditional

    def _pump(self) -> None:
        """Send unsent blocks in order while the session is open and nothing blocks."""
        if self._state is not _State.OPEN:
            return
        conn = self._conn
        assert conn is not None
        unsent, inflight = self._unsent, self._inflight
        frames: list[bytes] = []
        while unsent and not (inflight and inflight[-1].conditional):
            block = unsent.popleft()
            inflight.append(block)
            frames.append(block.frame)
        if frames:
            conn.writelines(frames)

    async def _write_chunk(self, chunk: list[bytes], first: int | None) -> Ack | None:
        """Accept a chunk of events numbered ``first, first + 1, ...`` (None: each after
        the last number accepted), sealing blocks as they fill. Returns the ack of the
        last event accepted for sending (None if the server held them all).

        Events the server already holds (numbers <= ``_acked``) are acknowledged locally;
        the others must be numbered above the last accepted one; a gap in the numbers
        seals the open batch first, so a block only ever holds consecutive numbers.
        """
        if set(map(type, chunk)) != _ONLY_BYTES:
            chunk = [_as_bytes(p) for p in chunk]
        sizes = list(map(len, chunk))
        n = len(chunk)
        rest = sum(sizes)  # no event can be larger than all of them together
        if rest > MAX_EVENT_SIZE and max(sizes) > MAX_EVENT_SIZE:
            raise event_too_large(max(sizes))
        rest += 8 * n  # record bytes (header + payload) of events i..n-1
        i = 0
        ack: Ack | None = None
        block_size = self._block_size
        # Every pass accepts or acknowledges at least one event (i grows), except a pass
        # that seals a batch of already-durable events, after which the batch is empty.
        while i < n:
            if self._state is _State.NEW or self._state is _State.STARTING:
                await self.start()  # judge numbers against what the server holds
            self._check()
            last = self._base + len(self._payloads)
            number = last + 1 if first is None else first + i
            if number <= self._acked:
                # The server already holds these (a writer replaying after a crash).
                if first is None and self._payloads:
                    self._seal()  # its events are durable too: sealing acknowledges them
                    continue
                k = min(n - i, self._acked - number + 1)
                rest -= sum(sizes[i : i + k]) + 8 * k
                i += k
                if not self._payloads and number + k - 1 > self._base:
                    self._base = number + k - 1
                continue
            if number <= last:
                raise ValueError(
                    f"event numbers must increase: {number} follows {last} "
                    f"on writer {self.writer_id}"
                )
            if number != last + 1:
                # A gap: these events never share an append with the ones before.
                if self._payloads:
                    self._seal()
                self._base = number - 1
            if not self._payloads:
                self._begin_batch()
            j, added = _cut(sizes, i, block_size - self._batch_bytes, rest)
            if j - i == n:
                self._payloads.extend(chunk)
                self._sizes.extend(sizes)
            else:
                self._payloads.extend(chunk[i:j])
                self._sizes.extend(sizes[i:j])
            self._batch_bytes += added
            rest -= added
            ack = self._batch_ack
            if self._batch_bytes >= block_size:
                self._seal()
            if self._held + self._batch_bytes > self._max_buffered:
                await self._wait_room()
            i = j
        self._update_fast()
        return ack

    async def _write_slow(
        self, data: bytes, event_number: int | None, expected_offset: int | None
    ) -> Ack:
        if expected_offset is None:
            ack = await self._write_chunk([data], event_number)
            if ack is None:  # the server held it already
                assert self._done_ack is not None
                return self._done_ack
            return ack
        if self._state is _State.NEW or self._state is _State.STARTING:
            await self.start()
        self._check()
        data = _as_bytes(data)
        if len(data) > MAX_EVENT_SIZE:
            raise event_too_large(len(data))
        last = self._base + len(self._payloads)
        number = last + 1 if event_number is None else event_number
        if number <= self._acked:
            # The server already has this event (a writer replaying after a crash).
            if not self._payloads and number > self._base:
                self._base = number
            self._update_fast()
            assert self._done_ack is not None
            return self._done_ack
        if number <= last:
            raise ValueError(
                f"event numbers must increase: {number} follows {last} on writer {self.writer_id}"
            )
        return await self._write_conditional(data, number, expected_offset)

    async def _write_conditional(self, data: bytes, number: int, expected_offset: int) -> Ack:
        if self._payloads:
            self._seal()
        loop = self._loop
        assert loop is not None
        fut: asyncio.Future[None] = loop.create_future()
        frame = encode(ConditionalAppend(self.writer_id, number, expected_offset, data, self._rid))
        size = len(data) + 8
        block = _Block(number, 1, frame, size, fut, conditional=True)
        self._base = number
        self._held += size
        self._unsent.append(block)
        self._update_fast()
        self._pump()
        if self._held > self._max_buffered:
            await self._wait_room()
        return Ack(fut)

    # -- internals: the session ------------------------------------------------------

    async def _connect(self, backoff: Backoff) -> tuple[Connection, int]:
        """Acquire a connection and run SetupAppend, retrying what a retry can fix."""
        pool = self._client._pool
        while True:
            remaining = max(0.0, backoff.deadline - asyncio.get_running_loop().time())
            try:
                conn = await pool.acquire(timeout=remaining)
                reply = await conn.call(
                    SetupAppend(
                        self._rid,
                        self.writer_id,
                        self.segment,
                        self._client.options.delegation_token,
                    ),
                    self._rid,
                )
            except ConnectFailed:
                raise  # the pool already retried for what was left of the budget
            except (ConnectionLost, Timeout) as e:
                if pool.closed:
                    raise ClientClosed("the client is closed") from e
                await backoff.wait(e)
                continue
            if isinstance(reply, AppendSetup):
                return conn, reply.last_event_number
            error = error_from_reply(reply)
            if isinstance(error, WrongHost):
                conn.close("answered WrongHost")
                await backoff.wait(error)
                continue
            raise error

    def _attach(self, conn: Connection) -> None:
        self._conn = conn
        conn.add_writer(self.writer_id, self._on_reply)
        conn.add_route(self._rid, self._on_reply)
        conn.on_close(self._on_connection_lost)

    def _detach(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.remove_writer(self.writer_id, self._on_reply)
            conn.remove_route(self._rid)
            conn.remove_close_listener(self._on_connection_lost)

    def _on_reply(self, cmd: Command) -> None:
        t = type(cmd)
        if t is DataAppended:
            self._on_acked(cmd)  # type: ignore[arg-type]
        elif t is ConditionalCheckFailed:
            self._on_conditional_failed(cmd)  # type: ignore[arg-type]
        elif t is InvalidEventNumber:
            self._fenced += 1
            if self._fenced >= 3:
                self._fail(error_from_reply(cmd))
            elif self._conn is not None:
                self._conn.close("fenced the writer (InvalidEventNumber)")
        elif t is AppendSetup:
            pass  # a late duplicate; the session is already set up
        else:
            error = error_from_reply(cmd)
            if isinstance(error, WrongHost) and self._conn is not None:
                self._conn.close("answered WrongHost")
                return
            if isinstance(error, SegmentSealed):
                first = self._first_unacked()
                error.event_number = first
                error.args = (f"{error.args[0]}; events from number {first} on were refused",)
            self._fail(error)

    def _first_unacked(self) -> int:
        for q in (self._inflight, self._unsent):
            if q:
                return q[0].last - q[0].count + 1
        return self._base + 1

    def _on_acked(self, cmd: DataAppended) -> None:
        n = cmd.event_number
        inflight = self._inflight
        freed = 0
        while inflight and inflight[0].last <= n:
            block = inflight.popleft()
            freed += block.size
            fut = block.fut
            if not fut.done():
                fut.set_result(None)
        self._fenced = 0
        if n > self._acked:
            self._acked = n
        if cmd.current_segment_write_offset >= 0:
            self._segment_length = cmd.current_segment_write_offset
        if freed:
            self._held -= freed
            if not self._room.is_set():
                self._room.set()
        if self._unsent:
            self._pump()
        elif not inflight and self._payloads and self._state is _State.OPEN:
            # Nothing in flight: waiting out the linger would only add latency.
            self._seal()

    def _on_conditional_failed(self, cmd: ConditionalCheckFailed) -> None:
        inflight = self._inflight
        for block in inflight:
            if block.conditional and block.last == cmd.event_number:
                inflight.remove(block)
                self._held -= block.size
                self._room.set()
                err = error_from_reply(cmd)
                if isinstance(err, ServerError):
                    err.segment = self.segment
                _reject(block.fut, err)
                break
        self._pump()

    def _on_connection_lost(self, error: ConnectionLost) -> None:
        if self._state is not _State.OPEN:
            return
        log.info("%r: %s; reconnecting", self, error)
        self._detach()
        self._state = _State.RECONNECTING
        # Everything unacknowledged is resent after the next AppendSetup, in order.
        self._unsent.extendleft(reversed(self._inflight))
        self._inflight.clear()
        assert self._loop is not None
        self._reconnect_task = self._loop.create_task(self._reconnect(error))

    async def _reconnect(self, cause: ConnectionLost) -> None:
        try:
            conn, last = await self._connect(Backoff(self._client.options))
        except BaseException as e:
            if self._state is _State.RECONNECTING:
                self._fail(e if isinstance(e, SegmentStoreError) else cause)
            if not isinstance(e, Exception):
                raise
            return
        if self._state is not _State.RECONNECTING:
            return
        self._attach(conn)
        self.reconnects += 1
        self._after_setup(last)

    def _after_setup(self, last: int) -> None:
        """The server has every event numbered <= ``last``: ack those, resend the rest."""
        if last != NULL_ATTRIBUTE_VALUE and last > self._acked:
            self._acked = last
        unsent = self._unsent
        freed = 0
        while unsent and unsent[0].last <= self._acked:
            block = unsent.popleft()
            freed += block.size
            _resolve(block.fut)
        if unsent and unsent[0].last - unsent[0].count + 1 <= self._acked:
            freed += self._trim(unsent[0])
        if freed:
            self._held -= freed
            self._room.set()
        if self._base < self._acked and self._payloads:
            # The server has part of the open batch too (only if someone else wrote with
            # this writer id); sealing trims it.
            self._seal()
        if self._base < self._acked:
            self._base = self._acked
        self._state = _State.OPEN
        self._update_fast()
        self._pump()
        if not self._inflight and not self._unsent and self._payloads:
            self._seal()

    def _trim(self, block: _Block) -> int:
        """Drop the events of ``block`` that the server already has; return freed bytes."""
        skip = self._acked - (block.last - block.count + 1) + 1
        mv = memoryview(block.frame)[_ABE_HEAD_SIZE : len(block.frame) - _ABE_TAIL_SIZE]
        pos = 0
        payloads: list[bytes] = []
        sizes: list[int] = []
        for i in range(block.count):
            _, length = _EVENT_HEADER.unpack_from(mv, pos)
            if i >= skip:
                payloads.append(bytes(mv[pos + 8 : pos + 8 + length]))
                sizes.append(length)
            pos += 8 + length
        count = len(payloads)
        size = sum(sizes) + 8 * count
        freed = block.size - size
        block.frame = self._frame(payloads, sizes, size, block.last)
        block.count = count
        block.size = size
        return freed

    def _fail(self, error: BaseException, *, deliberate: bool = False) -> None:
        """The writer cannot continue: fail every unacknowledged event with ``error``.

        ``deliberate`` (an :meth:`abort`) logs at DEBUG; an unexpected failure at WARNING.
        """
        if self._state in (_State.FAILED, _State.CLOSED):
            return
        self._state = _State.FAILED
        self._fast = False
        self._error = error
        if deliberate:
            log.debug("%r aborted: %s", self, error)
        else:
            log.warning("%r failed: %s", self, error)
        for q in (self._inflight, self._unsent):
            for block in q:
                _reject(block.fut, error)
            q.clear()
        self._held = 0
        if self._batch_fut is not None:
            _reject(self._batch_fut, error)
        self._payloads = []
        self._sizes = []
        self._batch_bytes = 0
        self._batch_fut = None
        self._batch_ack = None
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        self._room.set()
        self._detach()
        self._client._forget_writer(self)

    def _shutdown(self, error: BaseException) -> None:
        for q in (self._inflight, self._unsent):
            for block in q:
                _reject(block.fut, error)
            q.clear()
        if self._batch_fut is not None:
            _reject(self._batch_fut, error)
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        if self._reconnect_task is not None and not self._reconnect_task.done():
            self._reconnect_task.cancel()
        self._fast = False
        self._room.set()
        self._detach()
        self._client._forget_writer(self)


def _cut(sizes: list[int], i: int, room: int, rest: int) -> tuple[int, int]:
    """Where the open batch's block fills: ``(j, added)`` with ``j`` the end of the
    fewest events from ``i`` whose records (8-byte header + payload, ``added`` bytes in
    all) reach ``room`` bytes, or the end of ``sizes`` if all of them (``rest`` bytes)
    do not.

    Events of a stream mostly have similar sizes, so a guess from the average record
    size is usually within a few events of the cut: sum the guess (in C), step to the
    exact cut, and fall back to prefix sums after 64 steps.

    Example: ``_cut([100] * 10, 0, 300, 1080) == (3, 324)``
    """
    n = len(sizes)
    if rest < room:
        return n, rest
    # rest >= room: the cut exists, so while got < room there is an event at j to add.
    j = min(n, i + max(1, int(room * (n - i) / rest)))
    got = sum(sizes[i:j]) + 8 * (j - i)
    for _ in range(64):
        if got < room:
            got += sizes[j] + 8
            j += 1
        elif j - i > 1 and got - sizes[j - 1] - 8 >= room:
            j -= 1
            got -= sizes[j] + 8
        else:
            return j, got
    cum = list(itertools.accumulate(map(add, sizes[i:], itertools.repeat(8))))
    k = bisect_left(cum, room)
    return i + k + 1, cum[k]


def _as_bytes(data: object) -> bytes:
    if type(data) is bytes:
        return data
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)  # copy: the caller may reuse a mutable buffer
    raise TypeError(f"an event is bytes, not {type(data).__name__}")
