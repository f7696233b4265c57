"""The asyncio client: ``segmentstore_client.connect(...)``.

Contract: a :class:`Client` owns a small pool of connections to one segment store and
hands out writers, readers and tables that share it. Closing the client closes the
writers it made (flushing them first) and the pool.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
import weakref
from collections.abc import Generator, Iterable
from typing import Any, Final, Literal, overload

from .connection import ConnectionOptions, Endpoint
from .errors import ClientClosed
from .eventbus import EventBus
from .formats import RecordFormat
from .formats._sdk import FormattedReader, FormattedWriter
from .pool import within
from .position import Position
from .reader import EventReader, ReadChunk, read_segment
from .streams.admin import StreamAdmin
from .streams.reader_group import ReaderGroup
from .streams.stream_cut import StreamCut
from .streams.stream_writer import StreamWriter
from .table import Table
from .writer import EventWriter

log = logging.getLogger("segmentstore_client")

_MAX_READ_LENGTH: Final = 16 * 1024 * 1024


class Client(StreamAdmin):
    """An asyncio client of one segment store; make one with :func:`connect`.

    Example::

        async with segmentstore_client.connect("tcp://127.0.0.1:12345") as client:
            await client.create_segment("orders/0", exist_ok=True)
            async with client.writer("orders/0") as w:
                await w.write(b"hello")
            async for event in client.reader("orders/0"):
                print(event.data)
    """

    def __init__(
        self, endpoint: str | Endpoint, options: ConnectionOptions, controller: str = ""
    ) -> None:
        super().__init__(endpoint, options, controller)
        self._writers: set[EventWriter] = set()
        self._readers: weakref.WeakSet[EventReader] = weakref.WeakSet()
        self._closed = False

    def __repr__(self) -> str:
        return f"<Client {self.endpoint} {self.state}>"

    @property
    def state(self) -> str:
        """``"connected"`` (a connection is open), ``"disconnected"`` (none is: not
        opened yet, or reconnecting) or ``"closed"``.

        Example::

            if client.state != "connected":
                await client.ping(timeout=2)
        """
        if self._closed:
            return "closed"
        return "connected" if self._pool.connected else "disconnected"

    async def ping(self, *, timeout: float | None = None) -> float:
        """Round trip to the server in seconds: a KeepAlive answered by a KeepAlive over a
        pooled connection (connecting first if needed). Raises :class:`Timeout` after
        ``timeout`` (default: the request timeout), :class:`ConnectFailed` if the server
        cannot be reached, :class:`ClientClosed` after :meth:`close`.

        Example::

            print(f"{await client.ping(timeout=2) * 1000:.2f} ms")
        """
        if self._closed:
            raise ClientClosed("the client is closed")
        limit = self.options.request_timeout if timeout is None else timeout

        async def once() -> float:
            conn = await self._pool.acquire()
            return await conn.ping()

        return await within(limit, once())

    async def open(self) -> Client:
        """Open the first connection now (``async with`` and ``await`` call this), so that
        an unreachable server is reported here rather than at first use.

        Example::

            client = await segmentstore_client.connect("tcp://127.0.0.1:12345").open()
        """
        if self.options.credentials is not None and not self.options.delegation_token:
            await self.refresh_token()  # README "Security": a token from the controller
        await self._pool.acquire()
        return self

    def __await__(self) -> Generator[Any, None, Client]:
        return self.open().__await__()

    async def __aenter__(self) -> Client:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close every reader made by this client (their loops end), flush and close every
        writer it made, then close the connections; calls still waiting raise
        :class:`ClientClosed`. Nothing reconnects once ``close`` has begun: a writer
        whose connection is lost fails its unacknowledged events with ClientClosed.

        Example::

            await client.close()
        """
        if self._closed:
            return
        self._closed = True
        # No reconnects from here on: a writer whose connection is gone fails at once
        # (with ClientClosed) instead of retrying for the reconnect timeout; writers on
        # open connections still flush.
        self._pool.stop_connecting()
        for reader in list(self._readers):
            await reader.close()  # wakes a reader parked at the tail: its loop ends
        writers = list(self._writers)
        results = await asyncio.gather(*(w.close() for w in writers), return_exceptions=True)
        for w, r in zip(writers, results, strict=True):
            if isinstance(r, BaseException):
                log.warning("closing %r failed: %s", w, r)
        await self._close_controller()
        await self._pool.close()

    @overload
    def writer(
        self,
        segment: str,
        writer_id: str | uuid.UUID | None = ...,
        *,
        first_event_number: int | None = ...,
        block_size: int = ...,
        linger: float = ...,
        max_buffered_bytes: int = ...,
        format: None = ...,
    ) -> EventWriter: ...
    @overload
    def writer(
        self,
        segment: str,
        writer_id: str | uuid.UUID | None = ...,
        *,
        first_event_number: int | None = ...,
        block_size: int = ...,
        linger: float = ...,
        max_buffered_bytes: int = ...,
        format: str | RecordFormat,
    ) -> FormattedWriter: ...
    def writer(
        self,
        segment: str,
        writer_id: str | uuid.UUID | None = None,
        *,
        first_event_number: int | None = None,
        block_size: int = 1024 * 1024,
        linger: float = 0.002,
        max_buffered_bytes: int = 32 * 1024 * 1024,
        format: str | RecordFormat | None = None,
    ) -> EventWriter | FormattedWriter:
        """An :class:`EventWriter` for ``segment`` (it connects on first use).

        ``writer_id`` (UUID or any string) identifies the writer across reconnects and
        process restarts; None makes a fresh random id. Events are numbered 1, 2, ...
        after the last number the server holds for that id, or from
        ``first_event_number`` when given: a writer that replays the same events with the
        same numbers after a crash writes each exactly once. ``block_size`` and
        ``linger`` control batching; ``max_buffered_bytes`` bounds the bytes held.

        Example::

            async with client.writer("orders/0", writer_id="loader-1") as w:
                await w.write_many(payloads)

        ``format`` ("kafka", "events", "records", "databus" or a
        :class:`~segmentstore_client.formats.RecordFormat`) returns a
        :class:`~segmentstore_client.formats._sdk.FormattedWriter` writing one record
        per event: ``await w.write(b"v", key=b"k")``.
        """
        if self._closed:
            raise ClientClosed("the client is closed")
        w = EventWriter(
            self,
            segment,
            writer_id,
            first_event_number=first_event_number,
            block_size=block_size,
            linger=linger,
            max_buffered_bytes=max_buffered_bytes,
        )
        self._writers.add(w)
        return w if format is None else FormattedWriter(w, format)

    def _forget_writer(self, writer: object) -> None:
        if isinstance(writer, EventWriter):
            self._writers.discard(writer)

    def _forget_reader(self, reader: object) -> None:
        if isinstance(reader, EventReader):
            self._readers.discard(reader)

    @overload
    def reader(
        self,
        segment: str,
        offset: int | Position = ...,
        *,
        follow: bool = ...,
        read_size: int = ...,
        format: None = ...,
    ) -> EventReader: ...
    @overload
    def reader(
        self,
        segment: str,
        offset: int | Position = ...,
        *,
        follow: bool = ...,
        read_size: int = ...,
        format: str | RecordFormat,
    ) -> FormattedReader: ...
    def reader(
        self,
        segment: str,
        offset: int | Position = 0,
        *,
        follow: bool = False,
        read_size: int = 1024 * 1024,
        format: str | RecordFormat | None = None,
    ) -> EventReader | FormattedReader:
        """An :class:`EventReader` over ``segment`` from ``offset`` (an event boundary or
        a saved :class:`Position`).

        ``follow=False`` stops at the segment's current end; ``follow=True`` waits for
        new events at the tail (until the segment is sealed). Example::

            async for event in client.reader("orders/0", follow=True):
                print(event.data)

        ``format`` yields decoded records instead of events (see :meth:`writer`).
        """
        if self._closed:
            raise ClientClosed("the client is closed")
        reader = EventReader(self, segment, offset, follow=follow, read_size=read_size)
        self._readers.add(reader)
        return reader if format is None else FormattedReader(reader, format)

    async def read_bytes(
        self, segment: str, offset: int, length: int, *, timeout: float | None = None
    ) -> ReadChunk:
        """Up to ``length`` raw bytes of ``segment`` from ``offset`` (any offset, not only
        event boundaries), without parsing events: one ``ReadSegment`` over the pooled
        connections.

        The server may answer with fewer bytes (it cuts reads at its maximum read size
        and at the end of what it has). At or past the end of an open segment it holds
        the read until data arrives or its tail-read timeout passes (10 s by default),
        then answers with an empty chunk with ``at_tail`` set; a sealed segment's end
        reads as an empty chunk with ``end_of_segment`` set. Lost connections and
        WrongHost are retried like the reader's reads; errors are the reader's:
        :class:`NoSuchSegment`, :class:`SegmentTruncated` (``start_offset`` is the first
        readable offset), ...

        Example::

            chunk = await client.read_bytes("orders/0", 0, 4096)
            print(chunk.data[:8], chunk.next_offset, chunk.at_tail)
        """
        if offset < 0:
            raise ValueError("offset must not be negative")
        if not 1 <= length <= _MAX_READ_LENGTH:
            raise ValueError(f"length must be within 1..{_MAX_READ_LENGTH}")
        reply = await within(timeout, read_segment(self, segment, offset, length))
        data = reply.data if type(reply.data) is bytes else bytes(reply.data)
        if len(data) > length:  # the server rounds tiny reads up to a record header
            return ReadChunk(offset, data[:length], False, False)
        return ReadChunk(offset, data, reply.at_tail, reply.end_of_segment)

    def stream_writer(
        self,
        stream: str,
        writer_id: str | uuid.UUID | None = None,
        *,
        block_size: int = 1024 * 1024,
        linger: float = 0.002,
        max_buffered_bytes: int = 32 * 1024 * 1024,
        exactly_once: bool = False,
    ) -> StreamWriter:
        """A :class:`~segmentstore_client.streams.StreamWriter` for ``scope/stream``:
        events with routing keys, one exactly-once segment writer per segment (all with
        ``writer_id``), following scale events. Needs the ``streams`` extra.
        ``exactly_once`` (with a ``writer_id``): a writer made again after a crash and
        given the same events in the same order writes each once (README "Streams").

        Example::

            async with client.stream_writer("shop/orders") as w:
                await w.write(b"e", routing_key="user-7")
        """
        if self._closed:
            raise ClientClosed("the client is closed")
        return StreamWriter(
            self,
            stream,
            writer_id,
            block_size=block_size,
            linger=linger,
            max_buffered_bytes=max_buffered_bytes,
            exactly_once=exactly_once,
        )

    def reader_group(
        self,
        name: str,
        streams: Iterable[str],
        start: Literal["head", "tail"] | StreamCut | Iterable[StreamCut] = "head",
        *,
        reader_timeout: float = 30.0,
        sync_interval: float = 0.5,
    ) -> ReaderGroup:
        """The reader group ``scope/group`` over ``streams`` (created on first use from
        ``start``: the head, the tail or stream cuts; an existing group keeps its state).
        Readers that do not sync for ``reader_timeout`` seconds lose their segments.

        Example::

            group = await client.reader_group("shop/billing", ["shop/orders"])
            async for event in group.reader("reader-1"):
                print(event.segment, event.offset, event.data)
        """
        if self._closed:
            raise ClientClosed("the client is closed")
        return ReaderGroup(
            self, name, streams, start, reader_timeout=reader_timeout, sync_interval=sync_interval
        )

    def events(self, scope: str, *, partitions: int = 1, **options: Any) -> EventBus:
        """Request/reply with namespaced events over the segments of ``scope``, or over
        streams with ``over="streams"``: an emitter and a handler registry (``options``
        as :class:`~segmentstore_client.eventbus.EventBus` takes them).

        Example::

            async with client.events("shop", over="streams") as bus:
                reply = await bus.emit("price", b"sku-1", namespace="catalog")
        """
        return EventBus(self, scope, partitions=partitions, **options)

    def table(self, name: str) -> Table:
        """A handle on the table ``name`` (no request is sent until it is used).

        Example::

            table = client.table("app/_tables/settings")
            await table.put("k", "v")
        """
        if self._closed:
            raise ClientClosed("the client is closed")
        return Table(self, name)


def connect(
    endpoint: str = "tcp://127.0.0.1:12345",
    *,
    connect_timeout: float = 10.0,
    request_timeout: float = 30.0,
    reconnect_timeout: float = 60.0,
    keepalive_interval: float = 10.0,
    pool_size: int = 2,
    delegation_token: str = "",
    credentials: tuple[str, str] | str | None = None,
    controller: str = "",
    tls_ca_file: str = "",
    options: ConnectionOptions | None = None,
) -> Client:
    """A client of the segment store at ``endpoint`` (``tcp://host:port``).

    Use it as ``async with connect(...) as client`` or ``client = await connect(...)``;
    the first connection opens then. ``reconnect_timeout`` bounds how long writers,
    readers and idempotent requests keep reconnecting before they raise
    :class:`ConnectionLost`. ``controller`` is the controller's ``tcp://host:port`` (or
    ``tls://``): streams go through it (default: the segment store's host, port 9090), and
    with auth on ``credentials=("user", "password")`` (or a static token) fetch the
    delegation token from it; ``tls://`` endpoints trust ``tls_ca_file`` (README
    "Security"). Example::

        async with segmentstore_client.connect("tcp://127.0.0.1:12345") as client:
            print(await client.segment_info("orders/0"))
    """
    if options is None:
        options = ConnectionOptions(
            connect_timeout=connect_timeout,
            request_timeout=request_timeout,
            reconnect_timeout=reconnect_timeout,
            keepalive_interval=keepalive_interval,
            pool_size=pool_size,
            delegation_token=delegation_token,
            credentials=credentials,
            controller=controller,
            tls_ca_file=tls_ca_file,
        )
    return Client(endpoint, options, controller)
