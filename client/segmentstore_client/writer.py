"""EventWriter: batched, pipelined, exactly-once appends of events to one segment.

Contract: events are numbered per writer id (1, 2, 3, ... unless the caller says
otherwise) and cut into append blocks by size and by a short linger, as Kafka's producer
batches records. A block is one end-only AppendBlockEnd frame, built with one join (or,
for a few large events, kept as its parts: ``writer_blocks.frame_block``); its
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

This module is the public API (accepting events: ``write``, ``write_many``, ``flush``,
``close``); the session (setup, sending, acknowledgements, reconnects) is
``writer_session.py``, its states ``writer_state.py``, the frames ``writer_blocks.py``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Generator, Iterable
from typing import Any

from .errors import EventTooLarge, SegmentStoreError, WriterClosed
from .pool import Backoff, within
from .protocol import NULL_ATTRIBUTE_VALUE, ConditionalAppend, encode
from .protocol.events import MAX_EVENT_SIZE
from .writer_blocks import ONLY_BYTES, Ack, AckFuture, Block, as_bytes, cut, event_too_large
from .writer_session import WriterSession
from .writer_state import WriterInput, WriterState

__all__ = ["Ack", "EventTooLarge", "EventWriter", "event_too_large"]

log = logging.getLogger("segmentstore_client")

_S = WriterState
_I = WriterInput


class EventWriter(WriterSession):
    """Writes events to one segment; get one with :meth:`Client.writer`.

    Example::

        async with client.writer("orders/0", writer_id="importer-1") as writer:
            for payload in payloads:
                await writer.write(payload)      # returns at once (batched)
        # leaving the block flushed: every event is durable
    """

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

    async def start(self) -> EventWriter:
        """Connect and set up the append session (``write`` does it on first use).

        Example::

            writer = await client.writer("logs/0").start()
        """
        if self._state is _S.NEW:
            self._to(_I.START)
            self._loop = asyncio.get_running_loop()
            self._start_task = self._loop.create_future()
            self._done_ack = Ack(self._loop.create_future())
            self._done_ack._fut.set_result(None)
            try:
                conn, last = await self._connect(Backoff(self._client.options))
            except asyncio.CancelledError:
                self._to(_I.START_CANCELLED)  # nothing was set up; a later start may retry
                self._start_task.cancel()
                raise
            except BaseException as e:
                self._fail(e)
                self._start_task.set_exception(e)
                self._start_task.exception()
                raise
            if self.state is not _S.STARTING:  # closed or aborted meanwhile
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
            self._to(_I.SET_UP)
            self._update_fast()
            self._start_task.set_result(None)
        elif self._state is _S.STARTING:
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
        if self._state in (_S.CLOSED, _S.NEW):
            self._to(_I.CLOSE)
            self._client._forget_writer(self)
            return
        try:
            if self._state is not _S.FAILED:
                await self.flush()
            elif self._error is not None:
                raise self._error
        finally:
            self._shutdown(WriterClosed(f"writer for {self.segment!r} was closed"))
            self._to(_I.CLOSE)

    def abort(self) -> None:
        """Stop at once: unacknowledged events fail with :class:`WriterClosed` (the server
        may still have some of them). Being deliberate, it is logged at DEBUG only (an
        unexpected failure of the writer is logged at WARNING).

        Example::

            writer.abort()
        """
        if self._state is not _S.CLOSED:
            error = WriterClosed(f"writer for {self.segment!r} was aborted")
            self._fail(error, deliberate=True)
            self._shutdown(error)
            self._to(_I.CLOSE)

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
            data = as_bytes(data)
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
        if self._state is _S.NEW or self._state is _S.STARTING:
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
        if self._state is _S.NEW:
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
        fut = self._batch_fut = AckFuture(loop=loop)
        self._batch_ack = Ack(fut)
        if self._flush_handle is None:
            if self._inflight or self._unsent:
                self._flush_handle = loop.call_later(self._linger, self._on_linger)
            else:
                self._flush_handle = loop.call_soon(self._on_linger)

    def _on_linger(self) -> None:
        self._flush_handle = None
        if self._payloads and self._state not in (_S.FAILED, _S.CLOSED):
            self._seal()

    async def _wait_room(self) -> None:
        while (self._inflight or self._unsent) and self._held + self._batch_bytes > (
            self._max_buffered
        ):
            if self._error is not None:
                raise self._error
            self._room.clear()
            self._room_wanted = True
            await self._room.wait()
        if self._error is not None:
            raise self._error

    async def _write_chunk(self, chunk: list[bytes], first: int | None) -> Ack | None:
        """Accept a chunk of events numbered ``first, first + 1, ...`` (None: each after
        the last number accepted), sealing blocks as they fill. Returns the ack of the
        last event accepted for sending (None if the server held them all).

        Events the server already holds (numbers <= ``_acked``) are acknowledged locally;
        the others must be numbered above the last accepted one; a gap in the numbers
        seals the open batch first, so a block only ever holds consecutive numbers.
        """
        if set(map(type, chunk)) != ONLY_BYTES:
            chunk = [as_bytes(p) for p in chunk]
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
            if self._state is _S.NEW or self._state is _S.STARTING:
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
            j, added = cut(sizes, i, block_size - self._batch_bytes, rest)
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
        if self._state is _S.NEW or self._state is _S.STARTING:
            await self.start()
        self._check()
        data = as_bytes(data)
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
        fut: asyncio.Future[None] = AckFuture(loop=loop)
        frame = encode(ConditionalAppend(self.writer_id, number, expected_offset, data, self._rid))
        size = len(data) + 8
        block = Block(number, 1, frame, size, fut, conditional=True)
        self._base = number
        self._held += size
        self._unsent.append(block)
        self._update_fast()
        self._pump()
        if self._held > self._max_buffered:
            await self._wait_room()
        return Ack(fut)
