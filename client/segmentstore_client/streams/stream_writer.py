"""StreamWriter: events with routing keys over a stream's segments, following scaling.

Contract: one :class:`~segmentstore_client.EventWriter` per segment, with the id
``<stream writer id>/<segment name>`` (stable, so a writer made again with the same id
finds its numbers), so each segment keeps today's exactly-once numbering and batching. A routing
key goes to the segment the official clients pick (``routing.key_hash``); an event without
one goes to a uniformly random segment. Every write runs under one lock, so the events of
one key reach their segment in call order.

Scaling: the writer remembers the events it sent to each segment until that segment's
writer acknowledges them. When a segment answers SegmentIsSealed (seen on a write, a
flush, or by awaiting a :class:`StreamAck`), the writer asks the server which numbers it
holds for this writer id (exact, whatever was acknowledged locally), asks the controller
for the successors, replaces the sealed range by theirs, and resends every event after
the held number, in order, routed again by its key, before any newer event: nothing is
lost, nothing written twice, and a key's events stay in order. A stream with no
successors (sealed) fails with :class:`SegmentSealed`.

Exactly once across a crash of the process (``exactly_once=True``, with a ``writer_id``):
the contract is the segment writer's ``write_many`` replay. The application gives a writer
made again with the same id the same events in the same order from the start; routing is
deterministic (keys by hash, keyless events by a sequence seeded with the writer id, drawn
once per event and kept with it for resends), so every segment receives the same events in
the same order, numbered 1, 2, ... per segment; each segment writer acknowledges without
sending the numbers the server already holds for its id (AppendSetup) and appends the
rest. The replay starts at the first epoch whose segments hold events of this writer id
and follows the scales from there as the first writer did: a split's successors receive,
in input order, the events of their ranges after the sealed segment's held number, as they
did the first time. A merge makes the order in the successor depend on when each
predecessor's seal was seen, so a replay that would append to a merged successor already
holding events of this writer id raises :class:`StreamError` rather than guess.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections import deque
from collections.abc import Generator, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import NoSuchSegment, SegmentSealed, WriterClosed
from ..protocol.events import MAX_EVENT_SIZE
from ..writer import Ack, EventWriter
from ..writer_blocks import event_too_large
from .controller_client import StreamError, segment_name, split_stream
from .routing import CACHE_LIMIT, CACHED_KEY_CHARS, KeyRange, KeyRanges, key_hash
from .transaction import Transaction

if TYPE_CHECKING:
    from ..client import Client

_MAX_HOPS = 1000  # scale events one write may follow; a bound against a looping controller


@dataclass(slots=True)
class _Ticket:
    """What one write call waits for: the ack of its last event in each segment."""

    acks: list[tuple[int, Ack]] = field(default_factory=list)


@dataclass(slots=True)
class _Sent:
    """Events sent to one segment with consecutive numbers from ``first``."""

    first: int
    data: list[bytes]
    keys: list[str | float | None]  # a routing key, or a keyless event's drawn hash
    ticket: _Ticket | None

    @property
    def last(self) -> int:
        return self.first + len(self.data) - 1


class StreamAck:
    """Awaitable acknowledgement of a stream write: resolves when every event of the call
    is durable, following the events to successor segments if a scale moved them.

    Example::

        ack = await writer.write(b"e", routing_key="user-7")
        await ack
    """

    __slots__ = ("_ticket", "_writer")

    def __init__(self, writer: StreamWriter, ticket: _Ticket) -> None:
        self._writer = writer
        self._ticket = ticket

    def __await__(self) -> Generator[Any, None, None]:
        return self._wait().__await__()

    async def _wait(self) -> None:
        for _ in range(_MAX_HOPS):
            sealed = None
            for sid, ack in list(self._ticket.acks):
                try:
                    await ack
                except SegmentSealed:
                    sealed = sid
                    break
            if sealed is None:
                return
            await self._writer._on_sealed(sealed)
        raise SegmentSealed(f"{self._writer.stream}: more than {_MAX_HOPS} scale events")


class StreamWriter:
    """Writes events to a stream; get one with :meth:`Client.stream_writer`.

    Example::

        async with client.stream_writer("shop/orders") as w:
            await w.write(b'{"id": 1}', routing_key="customer-7")
            await w.write_many(payloads, routing_keys=keys)
    """

    def __init__(
        self,
        client: Client,
        stream: str,
        writer_id: str | uuid.UUID | None = None,
        *,
        block_size: int = 1024 * 1024,
        linger: float = 0.002,
        max_buffered_bytes: int = 32 * 1024 * 1024,
        exactly_once: bool = False,
    ) -> None:
        if exactly_once and writer_id is None:
            raise ValueError("exactly_once needs a writer_id that outlives the process")
        self._scope, self._stream = split_stream(stream)
        self.exactly_once = exactly_once
        self.stream = stream
        self.writer_id = str(writer_id) if writer_id is not None else str(uuid.uuid4())
        self._client = client
        self._block_size = block_size
        self._linger = linger
        self._max_buffered = max_buffered_bytes
        self._ranges: KeyRanges | None = None
        self._route_cache: dict[str, int] = {}
        self._counts: dict[int, int] = {}  # events handed to each segment's writer
        self._sealed_held: dict[int, int] = {}  # replay: sealed segment -> its held number
        # Keyless routing: random, or, for a replay, the same sequence on every run.
        self._random = random.Random(self.writer_id).random if exactly_once else random.random
        self._writers: dict[int, EventWriter] = {}
        self._sent: dict[int, deque[_Sent]] = {}
        self._lock = asyncio.Lock()
        self._error: BaseException | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"<StreamWriter {self.stream} id={self.writer_id} segments={sorted(self._writers)}>"

    @property
    def segments(self) -> set[int]:
        """The ids of the segments this writer routes to now."""
        return set() if self._ranges is None else self._ranges.segments

    async def start(self) -> StreamWriter:
        """Fetch the stream's current segments (the first write does it too)."""
        if self._ranges is None:
            ranges = await self._client.controller.current_segments(self._scope, self._stream)
            if not ranges:
                raise SegmentSealed(f"stream {self.stream} is sealed", self.stream)
            if self.exactly_once:
                ranges = await self._replay_start(ranges)
            self._ranges = KeyRanges(ranges)
        return self

    async def _held(self, sid: int) -> int:
        """The last event number segment ``sid`` holds for this writer (0: none)."""
        name = segment_name(self._scope, self._stream, sid)
        try:
            return await self._client.last_event_number(name, self._segment_writer_id(name)) or 0
        except NoSuchSegment:
            return 0  # truncated away (or never made)

    async def _replay_start(self, current: list[KeyRange]) -> list[KeyRange]:
        """The ranges of the first epoch holding events of this writer id (else now's)."""
        info = await self._client.stream_info(self.stream)
        for epoch in info.epochs[:-1]:
            for r in epoch:
                if await self._held(r.segment):
                    return list(epoch)
        return current

    async def __aenter__(self) -> StreamWriter:
        return await self.start()

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is None:
            await self.close()
        else:
            self.abort()

    def _check(self) -> None:
        if self._error is not None:
            raise self._error
        if self._closed:
            raise WriterClosed(f"stream writer for {self.stream!r} is closed")

    async def write(self, data: bytes, routing_key: str | None = None) -> StreamAck:
        """Queue one event; returns its :class:`StreamAck` without waiting for the server.

        Events with the same ``routing_key`` go to one segment (the one the official
        clients pick) and are read in order; without a key, a random segment.

        Example::

            await (await writer.write(b"e", routing_key="user-7"))  # durable now
        """
        return await self.write_many((data,), routing_keys=(routing_key,))

    async def write_many(
        self,
        events: Iterable[bytes],
        *,
        routing_keys: Iterable[str | None] | None = None,
    ) -> StreamAck:
        """Queue many events (the fastest way); ``routing_keys`` gives one key (or None)
        per event. Returns one :class:`StreamAck` for them all.

        Example::

            ack = await writer.write_many(payloads, routing_keys=(r["user"] for r in rows))
            await ack
        """
        data = events if isinstance(events, list) else list(events)
        keys: list[str | float | None]
        keys = [None] * len(data) if routing_keys is None else list(routing_keys)
        if len(keys) != len(data):
            raise ValueError(f"{len(data)} events but {len(keys)} routing keys")
        # Before routing: one oversized event must not leave the others half written
        # (the segments' writers would refuse it only after other segments took theirs).
        largest = max(map(len, data), default=0)
        if largest > MAX_EVENT_SIZE:
            raise event_too_large(largest)
        ticket = _Ticket()
        async with self._lock:
            self._check()
            await self.start()
            await self._send(data, keys, ticket)
        return StreamAck(self, ticket)

    async def _send(
        self, data: list[bytes], keys: list[str | float | None], ticket: _Ticket
    ) -> None:
        """Route events by key and append them, in order per segment (lock held)."""
        assert self._ranges is not None
        route, cache, rand = self._ranges.route, self._route_cache, self._random
        groups: dict[int, tuple[list[bytes], list[str | float | None]]] = {}
        for d, k in zip(data, keys, strict=True):
            if k is None:
                k = rand()  # kept: a resend after a scale routes it by the same hash
                sid = route(k)
            elif isinstance(k, float):
                sid = route(k)
            else:
                sid = cache.get(k, -1)
                if sid < 0:
                    sid = route(key_hash(k))
                    if len(k) <= CACHED_KEY_CHARS:  # bounded: distinct keys are unbounded
                        if len(cache) >= CACHE_LIMIT:
                            cache.clear()
                        cache[k] = sid
            g = groups.get(sid)
            if g is None:
                g = groups[sid] = ([], [])
            g[0].append(d)
            g[1].append(k)
        for sid, (gd, gk) in groups.items():
            if sid in self._sealed_held and await self._replayed(sid, gd, gk, ticket):
                continue
            try:
                w = await self._segment_writer(sid)
                first = w.last_event_number + 1
                ack = await w.write_many(gd)
            except SegmentSealed:
                if self.exactly_once:
                    self._sealed_held[sid] = await self._held(sid)
                    if await self._replayed(sid, gd, gk, ticket):
                        self._drop_writer(sid)  # all it sent is held: nothing to resend
                else:
                    await self._replace(sid)
                    await self._send(gd, gk, ticket)  # routed again over the successors
                continue
            self._counts[sid] = self._counts.get(sid, 0) + len(gd)
            sent = self._sent[sid]
            acked = w.acked_event_number
            while sent and sent[0].last <= acked:
                sent.popleft()
            sent.append(_Sent(first, gd, gk, ticket))
            ticket.acks.append((sid, ack))

    async def _replayed(
        self, sid: int, gd: list[bytes], gk: list[str | float | None], ticket: _Ticket
    ) -> bool:
        """A replay meets sealed segment ``sid``: its events up to the number it holds
        are there already (numbered from 1 per segment), so they are skipped and the
        range stays until they are; the rest go to the successors. True if all held."""
        count = self._counts.get(sid, 0)
        skip = min(len(gd), max(0, self._sealed_held[sid] - count))
        self._counts[sid] = count + skip
        if skip == len(gd):
            return True
        del self._sealed_held[sid]
        await self._replace(sid)
        await self._send(gd[skip:], gk[skip:], ticket)  # over the successors
        return False

    def _drop_writer(self, sid: int) -> None:
        w = self._writers.pop(sid, None)
        if w is not None:
            w.abort()
        for chunk in self._sent.pop(sid, ()):
            if chunk.ticket is not None:
                chunk.ticket.acks = [(s, a) for s, a in chunk.ticket.acks if s != sid]

    def _segment_writer_id(self, segment: str) -> str:
        # One id per segment: the wire protocol keys append sessions by writer id per
        # connection, and the segment writers share the client's pooled connections.
        return f"{self.writer_id}/{segment}"

    async def _segment_writer(self, sid: int) -> EventWriter:
        w = self._writers.get(sid)
        if w is None:
            name = segment_name(self._scope, self._stream, sid)
            w = self._client.writer(
                name,
                self._segment_writer_id(name),
                first_event_number=1 if self.exactly_once else None,
                block_size=self._block_size,
                linger=self._linger,
                max_buffered_bytes=self._max_buffered,
            )
            self._writers[sid] = w
            self._sent[sid] = deque()
            await w.start()
        return w

    async def _on_sealed(self, sid: int) -> None:
        """An ack of segment ``sid`` said SegmentSealed: resend what it did not take."""
        async with self._lock:
            if self._error is not None:
                raise self._error
            if sid in self._writers:
                await self._replace(sid)

    async def _replace(self, sid: int) -> int:
        """Replace sealed segment ``sid`` by its successors and resend (lock held);
        returns the last event number the sealed segment holds for this writer."""
        assert self._ranges is not None
        name = segment_name(self._scope, self._stream, sid)
        w = self._writers.pop(sid, None)
        sent = self._sent.pop(sid, deque())
        if w is not None:
            w.abort()
        held = await self._client.last_event_number(name, self._segment_writer_id(name)) or 0
        successors = await self._client.controller.successors(self._scope, self._stream, sid)
        if not successors:
            self._error = SegmentSealed(f"stream {self.stream} is sealed", self.stream)
            raise self._error
        if self.exactly_once:
            for s in successors:
                if len(s.predecessors) > 1 and await self._held(s.range.segment):
                    self._error = StreamError(
                        f"writer {self.writer_id} cannot replay exactly once on {self.stream}: "
                        f"segment {s.range.segment} merged several and holds its events"
                    )
                    raise self._error
        try:
            self._ranges = self._ranges.replace(sid, [s.range for s in successors])
        except ValueError as e:  # successors that leave part of the range to nobody
            controller = self._client.controller
            self._error = controller.invalid_reply("getSegmentsImmediatelyFollowing", str(e))
            raise self._error from None
        self._route_cache.clear()
        for chunk in sent:
            if chunk.ticket is not None:
                chunk.ticket.acks = [(s, a) for s, a in chunk.ticket.acks if s != sid]
            skip = max(0, held - chunk.first + 1)
            if skip < len(chunk.data):
                await self._send(chunk.data[skip:], chunk.keys[skip:], chunk.ticket or _Ticket())
        return held

    async def begin(self, lease_ms: int = 30_000) -> Transaction:
        """Open a transaction on the stream (see :class:`Transaction`).

        Example::

            txn = await writer.begin()
            await txn.write(b"e", routing_key="k")
            await txn.commit()
        """
        self._check()
        c = self._client.controller
        req = c.messages().CreateTxnRequest(
            streamInfo=c.info(self._scope, self._stream), lease=lease_ms
        )
        reply = await c.call("createTransaction", req)
        ranges = c.ranges(reply.activeSegments, "createTransaction")
        if not ranges:
            raise c.invalid_reply("createTransaction", "no segments")
        return Transaction(self._client, self._scope, self._stream, reply, self.writer_id, ranges)

    async def flush(self) -> None:
        """Wait until every event written so far is durable (following scale events).

        Example::

            await writer.flush()
        """
        for _ in range(_MAX_HOPS):
            async with self._lock:
                self._check()
                sealed = None
                for sid, w in list(self._writers.items()):
                    try:
                        await w.flush()
                    except SegmentSealed:
                        sealed = sid
                        break
                if sealed is None:  # every event sent is durable
                    for sent in self._sent.values():
                        sent.clear()
                    return
                await self._replace(sealed)
        raise SegmentSealed(f"{self.stream}: more than {_MAX_HOPS} scale events")

    async def close(self) -> None:
        """Flush, then close every segment writer.

        Example::

            await writer.close()
        """
        if self._closed:
            return
        try:
            if self._error is None:
                await self.flush()
        finally:
            self._closed = True
            for w in self._writers.values():
                if self._error is None:
                    await w.close()
                else:
                    w.abort()

    def abort(self) -> None:
        """Stop at once; unacknowledged events fail with :class:`WriterClosed`."""
        self._closed = True
        for w in self._writers.values():
            w.abort()
