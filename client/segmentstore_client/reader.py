"""EventReader: an async iterator over the events of one segment.

Contract: reads are byte ranges (ReadSegment/SegmentRead); the reader reassembles event
records (8-byte header + payload) across reads, so a record may straddle any number of
replies. One read is always prefetched while the caller works on the previous one. At the
tail a reader that follows keeps one read parked on the server (a long poll: the server
answers as soon as data arrives, or empty after its hold time), so it never busy-loops.
A reader that does not follow stops at the segment's length as of when it got there. A
sealed segment ends the iteration; a truncation raises :class:`SegmentTruncated`;
connection trouble is retried transparently (reads are idempotent).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections import deque
from collections.abc import AsyncIterator, Generator
from dataclasses import dataclass
from typing import Any, Final

from .admin import AdminClient
from .connection import next_request_id
from .errors import (
    ClientClosed,
    ConnectFailed,
    ConnectionLost,
    CorruptData,
    SegmentSealed,
    SegmentTruncated,
    Timeout,
    UnexpectedReply,
    WrongHost,
)
from .naming import checked_name
from .pool import Backoff
from .position import Position
from .protocol import ReadSegment, SegmentRead
from .replies import error_from_reply

log = logging.getLogger("segmentstore_client")

_HEADER: Final = struct.Struct(">ii")
_unpack_header = _HEADER.unpack_from


def _retrieve(task: asyncio.Task[SegmentRead | None]) -> None:
    if not task.cancelled():
        task.exception()


class Event:
    """One event read from a segment.

    ``data`` is the payload, ``offset`` the segment offset of its record and
    ``next_offset`` the offset of the record after it (where to resume).

    Example::

        async for event in client.reader("orders/0"):
            print(event.offset, event.data)
    """

    __slots__ = ("data", "offset")

    def __init__(self, data: bytes, offset: int) -> None:
        self.data = data
        self.offset = offset

    @property
    def next_offset(self) -> int:
        """Offset of the next event's record (this record's end).

        Example: ``client.reader(seg, offset=event.next_offset)`` resumes after ``event``
        """
        return self.offset + 8 + len(self.data)

    def __repr__(self) -> str:
        preview = self.data[:32]
        more = "..." if len(self.data) > 32 else ""
        return f"Event(offset={self.offset}, data={preview!r}{more})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Event):
            return NotImplemented
        return self.offset == other.offset and self.data == other.data

    def __hash__(self) -> int:
        return hash((self.offset, self.data))


@dataclass(frozen=True, slots=True)
class ReadChunk:
    """Raw bytes of a segment from one read (:meth:`Client.read_bytes`): no event
    parsing, so ``offset`` need not be an event boundary.

    ``data`` starts at ``offset``; ``at_tail`` means the server had no bytes beyond it
    when it answered; ``end_of_segment`` means the segment is sealed and nothing follows
    ``data``.

    Example::

        chunk = await client.read_bytes("orders/0", 0, 8)
        kind, length = struct.unpack(">ii", chunk.data)   # the first event's header
    """

    offset: int
    data: bytes
    at_tail: bool
    end_of_segment: bool

    @property
    def next_offset(self) -> int:
        """Offset of the byte after ``data`` (where the next read continues).

        Example: ``chunk = await client.read_bytes(seg, chunk.next_offset, 4096)``
        """
        return self.offset + len(self.data)


async def read_segment(
    client: AdminClient, segment: str, offset: int, length: int, timeout: float | None = None
) -> SegmentRead:
    """One ``ReadSegment`` over the client's pooled connections: lost connections,
    timeouts and WrongHost are retried with backoff (reads are idempotent) until the
    reconnect timeout; an error reply raises its named exception (:class:`NoSuchSegment`,
    :class:`SegmentTruncated` with ``start_offset``, ...), except that a sealed segment
    reads as its end (an empty reply with ``end_of_segment`` set). ``timeout`` as in
    :meth:`Connection.call` (0: wait forever, for tail reads). The reply may be empty: a
    tail read the server held for its hold time, or one cancelled by a delete.

    Example::

        reply = await read_segment(client, "orders/0", 0, 1 << 20)
    """
    checked_name(segment)
    backoff: Backoff | None = None
    pool = client._pool
    renewed = False
    while True:
        token = client.options.delegation_token
        try:
            # One reconnect budget for the whole read, counted from the first failure.
            conn = await pool.acquire(None if backoff is None else backoff.remaining())
            rid = next_request_id()
            request = ReadSegment(segment, offset, length, token, rid)
            reply = await conn.call(request, rid, timeout)
        except ConnectFailed:
            raise  # the pool already retried for what was left of the budget
        except (ConnectionLost, Timeout) as e:
            if pool.closed:
                raise ClientClosed("the client is closed") from e
            backoff = backoff or Backoff(client.options)
            log.info("read of %r at %d failed (%s); retrying", segment, offset, e)
            await backoff.wait(e)
            continue
        if type(reply) is SegmentRead:
            if reply.offset != offset:
                raise UnexpectedReply(
                    f"read at {offset} answered for offset {reply.offset}", segment, reply
                )
            return reply
        if not renewed and await client._renew_expired(reply, token):
            renewed = True  # an expired token: once more with a fresh one
            continue
        error = error_from_reply(reply)
        if isinstance(error, SegmentSealed):
            return SegmentRead(segment, offset, False, True, b"", rid)
        if isinstance(error, WrongHost):
            conn.close("answered WrongHost")
            backoff = backoff or Backoff(client.options)
            await backoff.wait(error)
            continue
        raise error


class EventReader:
    """Reads the events of one segment in order; get one with :meth:`Client.reader`.

    Example::

        reader = client.reader("orders/0", offset=0, follow=True)
        async for event in reader:
            handle(event.data)
            checkpoint(reader.position.to_json())
    """

    def __init__(
        self,
        client: AdminClient,
        segment: str,
        offset: int | Position = 0,
        *,
        follow: bool = False,
        read_size: int = 1024 * 1024,
        max_event_size: int = 16 * 1024 * 1024,
    ) -> None:
        if isinstance(offset, Position):
            if offset.segment != segment:
                raise ValueError(f"position is for segment {offset.segment!r}, not {segment!r}")
            offset = offset.offset
        if offset < 0:
            raise ValueError("offset must not be negative")
        if not 8 <= read_size <= 16 * 1024 * 1024:
            raise ValueError("read_size must be within 8 bytes .. 16 MiB")
        self._client = client
        self.segment = checked_name(segment)
        self.follow = follow
        self._read_size = read_size
        self._max_event_size = max_event_size
        self._closed = False
        self._reset(offset)

    def _reset(self, offset: int) -> None:
        self._offset = offset  # next event to hand out
        self._read_offset = offset  # next byte to ask the server for
        self._parse_offset = offset  # segment offset of the first unparsed byte
        self._parts: list[bytes] = []
        self._have = 0
        self._need = 0
        self._events: deque[Event] = deque()
        self._task: asyncio.Task[SegmentRead | None] | None = None
        self._done = False
        self._end = -1  # known segment length (non-following readers)
        self._empty_streak = 0

    # -- public ----------------------------------------------------------------------

    @property
    def position(self) -> Position:
        """Checkpoint: where the next event handed out will come from.

        Example::

            saved = reader.position.to_json()
        """
        return Position(self.segment, self._offset)

    @property
    def offset(self) -> int:
        """Offset of the next event to hand out (``position.offset``)."""
        return self._offset

    def __aiter__(self) -> EventReader:
        return self

    async def __anext__(self) -> Event:
        events = self._events
        if not events:
            await self._fill()
            if not events:
                raise StopAsyncIteration
        event = events.popleft()
        self._offset = event.offset + 8 + len(event.data)
        return event

    async def read_batch(self) -> list[Event]:
        """The next events available (at least one), or an empty list at the end.

        Cheaper than iterating one by one when events are small. Example::

            while batch := await reader.read_batch():
                process([e.data for e in batch])
        """
        if not self._events:
            await self._fill()
        return self._take_batch()

    async def poll(self, timeout: float) -> list[Event]:
        """The events available within ``timeout`` seconds (at least one), or an empty
        list if none arrived in time or the reader has ended (see :attr:`ended`). A read
        still in flight when the time is up stays in flight for the next call.

        Example::

            while not reader.ended:
                for event in await reader.poll(0.5):
                    handle(event)
                do_housekeeping()
        """
        if timeout < 0:
            raise ValueError("timeout must not be negative")
        if not self._events:
            await self._fill(asyncio.get_running_loop().time() + timeout)
        return self._take_batch()

    async def next(self, timeout: float | None = None) -> Event | None:
        """The next event, or None once the reader has ended; raises :class:`Timeout`
        if none arrives within ``timeout`` seconds (None: wait as long as it takes).

        Example::

            event = await reader.next(timeout=5)
        """
        events = self._events
        if not events:
            if timeout is None:
                await self._fill()
            else:
                await self._fill(asyncio.get_running_loop().time() + timeout)
            if not events:
                if self._done:
                    return None
                raise Timeout(f"no event from {self.segment!r} within {timeout:g}s")
        event = events.popleft()
        self._offset = event.offset + 8 + len(event.data)
        return event

    @property
    def ended(self) -> bool:
        """True once every event was handed out and no more will come (the end of a
        reader that does not follow, a sealed segment, or :meth:`close`).

        Example: ``while not reader.ended: ...``
        """
        return self._done and not self._events

    def _take_batch(self) -> list[Event]:
        batch = list(self._events)
        self._events.clear()
        if batch:
            last = batch[-1]
            self._offset = last.offset + 8 + len(last.data)
        return batch

    async def batches(self) -> AsyncIterator[list[Event]]:
        """Iterate over batches of events (see :meth:`read_batch`).

        Example::

            async for batch in reader.batches():
                sink.extend(e.data for e in batch)
        """
        while True:
            batch = await self.read_batch()
            if not batch:
                return
            yield batch

    def seek(self, offset: int | Position) -> None:
        """Continue from ``offset`` (an event boundary), dropping anything prefetched.

        Example::

            try:
                event = await reader.__anext__()
            except SegmentTruncated as e:
                reader.seek(e.start_offset)
        """
        if isinstance(offset, Position):
            offset = offset.offset
        if offset < 0:
            raise ValueError("offset must not be negative")
        self._cancel_task()
        self._reset(offset)

    async def close(self) -> None:
        """Stop prefetching; the reader cannot be used afterwards.

        Example::

            await reader.close()
        """
        self._closed = True
        self._done = True
        self._events.clear()
        self._client._forget_reader(self)
        task = self._cancel_task()
        if task is not None and task is not asyncio.current_task():
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait((task,))  # its outcome no longer matters

    async def __aenter__(self) -> EventReader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __await__(self) -> Generator[Any, None, EventReader]:
        async def ready() -> EventReader:
            return self

        return ready().__await__()

    def __repr__(self) -> str:
        return f"<EventReader {self.segment!r} at {self._offset} follow={self.follow}>"

    # -- internals -------------------------------------------------------------------

    def _cancel_task(self) -> asyncio.Task[SegmentRead | None] | None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
        return task

    def _spawn(self, offset: int) -> asyncio.Task[SegmentRead | None]:
        task = asyncio.get_running_loop().create_task(self._fetch(offset))
        # A prefetch nobody awaits any more (the caller left the loop) must not print
        # "Task exception was never retrieved"; whoever awaits it still gets the error.
        task.add_done_callback(_retrieve)
        return task

    async def _fill(self, deadline: float | None = None) -> None:
        """Wait for the next reply and parse it, until there are events or the end (or
        the loop time ``deadline`` passed: the read in flight then stays in flight)."""
        events = self._events
        while not events and not self._done:
            if self._closed:
                return
            task = self._task
            if task is None:
                # Kept in _task while awaited, so that close() can cancel it.
                task = self._task = self._spawn(self._read_offset)
            if deadline is not None and not task.done():
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining > 0:
                    await asyncio.wait((task,), timeout=remaining)
                if not task.done():
                    return
            try:
                reply = await task
            except asyncio.CancelledError:
                if self._task is task:
                    self._task = None
                current = asyncio.current_task()
                if self._closed and (current is None or not current.cancelling()):
                    return  # close() cancelled the read: a clean end
                task.cancel()
                raise
            except BaseException:
                if self._task is task:
                    self._task = None
                raise
            self._task = None
            if reply is None:
                self._finish()
                return
            data = reply.data
            n = len(data)
            self._read_offset += n
            if not reply.end_of_segment:
                self._task = self._spawn(self._read_offset)  # prefetch while parsing
            if n:
                self._empty_streak = 0
                self._parse(data if type(data) is bytes else bytes(data))
            if reply.end_of_segment:
                self._finish()

    def _finish(self) -> None:
        self._done = True
        if self._parts:
            raise CorruptData(
                f"segment {self.segment!r} ends inside an event record at offset "
                f"{self._parse_offset} ({self._have} bytes of {self._need})"
            )

    async def _fetch(self, offset: int) -> SegmentRead | None:
        """One read at ``offset`` (None: nothing more for a reader that does not follow)."""
        client = self._client
        if (not self.follow and offset >= self._end) or (self._end < 0 and offset > 0):
            info = await client.segment_info(self.segment)
            self._end = info.length
            if offset > info.length and offset == self._offset:
                raise SegmentTruncated(
                    f"segment {self.segment!r}: offset {offset} is past its end "
                    f"({info.length}); start from an offset within "
                    f"{info.start_offset}..{info.length}",
                    self.segment,
                    None,
                    info.start_offset,
                    offset,
                )
            if not self.follow and offset >= self._end:
                return None
        loop = asyncio.get_running_loop()
        while not self._closed:
            started = loop.time()
            reply = await read_segment(
                client, self.segment, offset, self._read_size, 0 if self.follow else None
            )
            if len(reply.data) or reply.end_of_segment:
                return reply
            # An empty reply: a tail read the server held for its hold time, or a read
            # cancelled by a delete. Ask again, pacing replies that come back at once so
            # a server that does not park reads cannot make us spin.
            if not self.follow:
                info = await client.segment_info(self.segment)
                self._end = info.length
                if offset >= self._end:
                    return None
            if loop.time() - started < 0.05:
                self._empty_streak += 1
                await asyncio.sleep(min(1.0, 0.01 * 2 ** min(self._empty_streak, 7)))
        return None

    def _parse(self, data: bytes) -> None:
        """Turn contiguous segment bytes into events, keeping an incomplete record."""
        if self._parts:
            self._parts.append(data)
            self._have += len(data)
            if self._have < self._need:
                return
            data = b"".join(self._parts)
            self._parts = []
        base = self._parse_offset
        n = len(data)
        pos = 0
        events = self._events
        append = events.append
        max_size = self._max_event_size
        need = 0
        while True:
            if n - pos < 8:
                need = 8
                break
            t, length = _unpack_header(data, pos)
            if t != 0 or length < 0 or length > max_size:
                raise CorruptData(
                    f"segment {self.segment!r} holds no event record at offset {base + pos} "
                    f"(type {t}, length {length}); was it written as raw bytes?"
                )
            end = pos + 8 + length
            if end > n:
                need = 8 + length
                break
            append(Event(data[pos + 8 : end], base + pos))
            pos = end
        self._parse_offset = base + pos
        if pos < n:
            rest = data[pos:]
            self._parts = [rest]
            self._have = len(rest)
            self._need = need
        else:
            self._have = self._need = 0
