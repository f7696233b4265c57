"""Request/reply with namespaced events: ``client.events(scope)``.

Every message is one namespaced event (:mod:`segmentstore_client.formats.events`) stored
as one segment event. Requests travel one of two ways (``over=``):

``over="streams"`` (needs the controller and the ``streams`` extra)
    requests go to the stream ``{scope}/requests`` (``partitions`` fixed segments, made
    on first use), written with a routing key: the event's id by default (work spreads
    over the segments) or ``routing_key=`` of :meth:`EventBus.emit` (e.g. the event's
    ``namespace/name``: events of one key reach one handler, in order). Handler
    processes read it as the reader group ``{scope}/{group}`` (``serve(reader_id=...)``),
    so they share the segments and rebalance when one joins, leaves or dies (after
    ``reader_timeout`` seconds without a sync). The group starts at the stream's head
    and its state (offsets per segment) is stored in a table segment: a handler that
    restarts with the same ``reader_id`` resumes its segments where the stored state
    says, not at the end it finds.
``over="segments"`` (the default; no controller)
    ``{scope}/requests/{p}`` for p = 0 .. partitions-1, one handler process per
    partition (``serve(p)``) reading from the end it finds (or ``offset=``); emitters
    spread requests over the partitions in turn.

Replies go, in both modes, to the segment ``{scope}/replies/{prefix}`` of the emitter:
``prefix`` is the upper 32 bits (8 hex digits) of every event id that emitter makes (ids
are ``prefix << 32 | counter`` with a random per-bus prefix), so a handler knows where
to reply from the request's id alone (the event format has no reply-to field).

Delivery contract over streams (at least once, each reply seen once): a handler takes
its requests one at a time and moves past a request only when its reply is durable (or
it has none), so the group's stored offsets never pass an unanswered request; a handler
killed at any point leaves the requests after its last stored offset to be handled again
(by its restart or, after ``reader_timeout``, by another handler). The same request may
therefore be answered twice; the emitter keeps the first reply to each request id and
drops any later one (counted in ``late_replies``), as it drops replies to requests it no
longer waits for (timed out). A handler that raises gives no reply (logged); a reply to
an emitter whose reply segment is gone is dropped with a warning; any other failure to
store a reply stops ``serve`` with the request still unpassed.

Behaviour, as the event format specifies it:

- an incoming event whose ref id is the id of an emitted event still waiting for its
  reply completes that wait; otherwise it is handled as a regular event (except a late
  reply to this bus's own request, dropped as above);
- a regular event goes to the handler registered for its name (no namespace), or for
  its name in its namespace; with no such handler it is ignored (and counted in
  ``ignored``);
- a handler's return value is emitted as the reply (ref id = the request's id, same
  name and namespace): ``bytes`` as they are, ``str`` as UTF-8, an
  :class:`~segmentstore_client.formats.events.Event` as given (its ref id set), None
  for no reply, anything else as a JSON serde payload.

A request is written durably before ``emit`` waits for its reply; replies are read from
the end of the emitter's reply segment when the bus starts.

Example::

    bus = client.events("shop", over="streams", partitions=2)
    @bus.handler("price", namespace="catalog")
    async def price(ev):
        return b"9.99"
    server = asyncio.create_task(bus.serve(reader_id="pricer-1"))  # in a handler process
    reply = await bus.emit("price", b"sku-1", namespace="catalog", timeout=5)
    print(reply.data)                                # b"9.99"
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import os
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from .errors import ClientClosed, NoSuchSegment, SegmentStoreError, Timeout
from .formats import events
from .formats.errors import FormatError
from .formats.events import Event

if TYPE_CHECKING:
    from .client import Client
    from .reader import EventReader
    from .streams.reader_group import GroupReader, ReaderGroup
    from .streams.stream_writer import StreamWriter
    from .writer import Ack, EventWriter

log = logging.getLogger("segmentstore_client.eventbus")

Handler = Callable[[Event], Any]
H = TypeVar("H", bound=Handler)
Transport = Literal["segments", "streams"]


class EventBus:
    """An emitter and a handler registry over the segments or streams of ``scope``
    (module docstring). Make one with ``client.events(scope, partitions=1,
    over="segments")``. Over streams, ``group``, ``reader_timeout``, ``sync_interval``
    and ``read_size`` tune the handlers' reader group: a handler reads the stream in
    chunks of ``read_size`` bytes and stores its offsets between chunks (at most every
    ``sync_interval`` seconds), so a restart repeats at most that much work; a request
    must fit in one chunk (``emit`` refuses a larger one)."""

    def __init__(
        self,
        client: Client,
        scope: str,
        *,
        partitions: int = 1,
        over: Transport = "segments",
        group: str = "handlers",
        reader_timeout: float = 10.0,
        sync_interval: float = 0.5,
        read_size: int = 1024 * 1024,
    ) -> None:
        if partitions < 1:
            raise ValueError("partitions must be at least 1")
        if over not in ("segments", "streams"):
            raise ValueError(f"over must be 'segments' or 'streams', not {over!r}")
        if over == "streams" and ("/" in scope or not scope or "/" in group or not group):
            raise ValueError(
                f"over streams, scope and group are single names: {scope!r}, {group!r}"
            )
        self.client = client
        self.scope = scope
        self.partitions = partitions
        self.over: Transport = over
        self.group = group
        self.reader_timeout = reader_timeout
        self.sync_interval = sync_interval
        self.read_size = read_size
        self.prefix = int.from_bytes(os.urandom(4), "big")
        self.ignored = 0
        """Events no handler took (unknown name or namespace)."""
        self.handled = 0
        self.late_replies = 0
        """Replies to this bus's requests that came when no one waited (a second reply
        to one request, or a reply after its timeout): dropped."""
        self._ids = itertools.count(1)
        self._issued = 0
        self._rr = itertools.count()
        self._global: dict[str, Handler] = {}
        self._namespaces: dict[str, dict[str, Handler]] = {}
        self._pending: dict[int, asyncio.Future[Event]] = {}
        self._writers: dict[str, EventWriter] = {}
        self._stream_writer: StreamWriter | None = None
        self._stream_ready = False
        self._reply_task: asyncio.Task[None] | None = None
        self._serving: set[asyncio.Task[Any]] = set()
        self._started: asyncio.Future[None] | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"<EventBus {self.scope} over {self.over} prefix={self.prefix:08x}>"

    # -- naming --------------------------------------------------------------------------

    @property
    def request_stream(self) -> str:
        """The requests' stream (``over="streams"``)."""
        return f"{self.scope}/requests"

    def request_segment(self, partition: int) -> str:
        """A partition's request segment (``over="segments"``)."""
        return f"{self.scope}/requests/{partition}"

    def reply_segment(self, prefix: int) -> str:
        return f"{self.scope}/replies/{prefix:08x}"

    def reader_group(self) -> ReaderGroup:
        """The handlers' reader group over the request stream (``over="streams"``)."""
        return self.client.reader_group(
            f"{self.scope}/{self.group}",
            [self.request_stream],
            "head",
            reader_timeout=self.reader_timeout,
            sync_interval=self.sync_interval,
        )

    async def _ensure_stream(self) -> None:
        if not self._stream_ready:
            await self.client.create_scope(self.scope, exist_ok=True)
            await self.client.create_stream(self.request_stream, self.partitions, exist_ok=True)
            self._stream_ready = True

    # -- handlers ------------------------------------------------------------------------

    def on(self, name: str, handler: Handler, *, namespace: str | None = None) -> None:
        """Register ``handler`` (a function or coroutine function taking the
        :class:`Event`) for ``name``, in ``namespace`` when given.

        Example::

            bus.on("ping", lambda ev: b"pong", namespace="health")
        """
        if namespace is None:
            self._global[name] = handler
        else:
            self._namespaces.setdefault(namespace, {})[name] = handler

    def handler(self, name: str, *, namespace: str | None = None) -> Callable[[H], H]:
        """Decorator form of :meth:`on`."""

        def register(fn: H) -> H:
            self.on(name, fn, namespace=namespace)
            return fn

        return register

    def _lookup(self, ev: Event) -> Handler | None:
        if ev.namespace is None:
            return self._global.get(ev.name)
        ns = self._namespaces.get(ev.namespace)
        return None if ns is None else ns.get(ev.name)

    # -- emitting ------------------------------------------------------------------------

    def new_id(self) -> int:
        self._issued = next(self._ids) & 0xFFFFFFFF
        return self.prefix << 32 | self._issued

    def _is_own(self, ev_id: int) -> bool:
        return ev_id >> 32 == self.prefix and 0 < ev_id & 0xFFFFFFFF <= self._issued

    async def start(self) -> EventBus:
        """Create the reply segment and start reading it (``emit`` calls this)."""
        if self._closed:
            raise ClientClosed("the event bus is closed")
        if self._started is None:
            self._started = asyncio.get_running_loop().create_future()
            try:
                if self.over == "streams":
                    await self._ensure_stream()
                seg = self.reply_segment(self.prefix)
                await self.client.create_segment(seg, exist_ok=True)
                end = (await self.client.segment_info(seg)).length
                reader = self.client.reader(seg, end, follow=True)
                self._reply_task = asyncio.create_task(self._pump(reader, serving=False))
                self._started.set_result(None)
            except BaseException as e:
                self._started.set_exception(e)
                self._started.exception()  # retrieved: the raise below reports it
                self._started = None
                raise
        await self._started
        return self

    async def emit(
        self,
        name: str,
        payload: bytes = b"",
        *,
        namespace: str | None = None,
        wait_reply: bool = True,
        timeout: float | None = 30.0,
        partition: int | None = None,
        routing_key: str | None = None,
    ) -> Event | int:
        """Write an event to the requests: over segments to ``partition`` (or the next
        one in turn), over streams with ``routing_key`` (default: the event's id). With
        ``wait_reply`` return the reply :class:`Event` (raises :class:`Timeout` after
        ``timeout`` seconds); without, return the event's id.

        Example::

            reply = await bus.emit("ping", b"", namespace="health", timeout=5)
        """
        if self.over == "streams" and partition is not None:
            raise ValueError("partition is for over='segments'; over streams give routing_key")
        if self.over == "segments" and routing_key is not None:
            raise ValueError("routing_key is for over='streams'; over segments give partition")
        await self.start()
        ev_id = self.new_id()
        data = events.encode_event(name, payload, id=ev_id, namespace=namespace)
        if self.over == "streams" and len(data) + 8 > self.read_size:
            raise ValueError(
                f"a request of {len(data)} bytes does not fit the handlers' reads "
                f"(read_size {self.read_size})"
            )
        key = routing_key if routing_key is not None else f"{ev_id:016x}"
        p = next(self._rr) % self.partitions if partition is None else partition
        if not wait_reply:
            await self._write_request(data, p, key)
            return ev_id
        fut: asyncio.Future[Event] = asyncio.get_running_loop().create_future()
        self._pending[ev_id] = fut
        try:
            await self._write_request(data, p, key)
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            raise Timeout(f"no reply to {name!r} (id {ev_id}) within {timeout} s") from None
        finally:
            self._pending.pop(ev_id, None)

    async def _write_request(self, data: bytes, partition: int, key: str) -> None:
        """Write a request durably (segment ``partition`` or the stream under ``key``)."""
        if self.over == "segments":
            await self._write(self.request_segment(partition), data, durable=True)
            return
        w = self._stream_writer
        if w is None:
            w = self._stream_writer = self.client.stream_writer(self.request_stream)
        try:
            await (await w.write(data, routing_key=key))
        except SegmentStoreError:
            if self._stream_writer is w:
                self._stream_writer = None
                w.abort()
            raise

    async def _write(self, segment: str, data: bytes, *, durable: bool = False) -> Ack:
        """Queue ``data`` (and wait for its ack if ``durable``); a writer that failed is
        dropped so the next write to ``segment`` starts afresh."""
        w = self._writers.get(segment)
        if w is None:
            w = self._writers[segment] = self.client.writer(segment)
        try:
            ack = await w.write(data)
            if durable:
                await ack
            return ack
        except SegmentStoreError:
            if self._writers.get(segment) is w:
                del self._writers[segment]
                w.abort()
            raise

    # -- serving -------------------------------------------------------------------------

    async def serve(
        self,
        partition: int | None = None,
        *,
        offset: int | None = None,
        reader_id: str | None = None,
    ) -> None:
        """Handle requests until cancelled or :meth:`close`, emitting the replies.
        Over segments: ``partition``'s segment from its end (or ``offset``). Over
        streams: as ``reader_id`` (default host-pid) of the handlers' reader group,
        from the group's stored offsets.

        Example::

            await bus.serve(0)                         # over segments, per partition
            await bus.serve(reader_id="handler-1")     # over streams
        """
        if self._closed:
            raise ClientClosed("the event bus is closed")
        if self.over == "streams" and (partition is not None or offset is not None):
            raise ValueError("over streams, handlers share a reader group: give reader_id")
        if self.over == "segments" and reader_id is not None:
            raise ValueError("reader_id is for over='streams'; over segments give partition")
        task = asyncio.current_task()
        if task is not None:
            self._serving.add(task)
        try:
            if self.over == "streams":
                await self._serve_group(reader_id or f"{socket.gethostname()}-{os.getpid()}")
                return
            seg = self.request_segment(partition or 0)
            await self.client.create_segment(seg, exist_ok=True)
            if offset is None:
                offset = (await self.client.segment_info(seg)).length
            await self._pump(self.client.reader(seg, offset, follow=True), serving=True)
        finally:
            self._serving.discard(task)  # type: ignore[arg-type]

    async def _serve_group(self, reader_id: str) -> None:
        """One member of the handlers' group: a request is passed (the next one asked
        of the group reader) only once its reply is durable. On the way out the member
        leaves the group at the end of what it answered, so the request in hand (if
        any) goes to the next reader of its segment."""
        from .streams.stream_cut import StreamCut  # the streams extra, on first use

        await self._ensure_stream()
        group = await self.reader_group().open()
        reader: GroupReader = group.reader(reader_id, read_size=self.read_size)
        answered: dict[int, int] = {}  # segment id -> offset after its last answered request
        it = reader.events()
        try:
            async for sev in it:
                answered[sev.segment] = sev.offset  # in hand: not passed if we stop here
                try:
                    ev = events.decode_event(sev.data)
                except FormatError as e:
                    log.warning(
                        "%s: skipped a damaged event at %d/%d: %s", self, sev.segment, sev.offset, e
                    )
                else:
                    await self._dispatch(ev, durable=True)
                answered[sev.segment] = sev.offset + 8 + len(sev.data)
        finally:
            if inspect.isasyncgen(it):
                await it.aclose()
            cut = StreamCut(self.request_stream, answered)
            try:
                await asyncio.shield(group.reader_offline(reader_id, cut))
            except (SegmentStoreError, OSError, TimeoutError) as e:
                log.warning(
                    "%s: reader %s did not leave its group (it times out): %s", self, reader_id, e
                )

    async def _pump(self, reader: EventReader, *, serving: bool) -> None:
        try:
            async for batch in reader.batches():
                for raw in batch:
                    try:
                        ev = events.decode_event(raw.data)
                    except FormatError as e:
                        log.warning("%s: skipped a damaged event at %d: %s", self, raw.offset, e)
                        continue
                    await self._dispatch(ev, durable=False)
        except (asyncio.CancelledError, ClientClosed):
            raise
        except SegmentStoreError as e:
            if not self._closed:
                log.warning("%s: %s reader stopped: %s", self, "request" if serving else "reply", e)
                if not serving:
                    self._fail_pending(e)
            raise
        finally:
            await reader.close()

    async def _dispatch(self, ev: Event, *, durable: bool) -> None:
        """Complete a wait, or run the handler and write its reply (and, if ``durable``,
        wait until the reply is stored; a failure other than a vanished reply segment
        then propagates)."""
        if ev.ref_id is not None:
            fut = self._pending.get(ev.ref_id)
            if fut is not None:
                if not fut.done():
                    fut.set_result(ev)
                    return
                self.late_replies += 1
                return
            if self._is_own(ev.ref_id):
                self.late_replies += 1
                return
        handler = self._lookup(ev)
        if handler is None:
            self.ignored += 1
            return
        self.handled += 1
        try:
            result = handler(ev)
            if inspect.isawaitable(result):
                result = await result
        except Exception:
            log.exception("%s: handler for %r raised", self, ev.name)
            return
        if result is None:
            return
        reply = _reply_event(ev, result)
        try:
            ack = await self._write(
                self.reply_segment(ev.id >> 32), reply.encode(), durable=durable
            )
        except NoSuchSegment as e:
            log.warning("%s: reply to %d dropped, its emitter is gone: %s", self, ev.id, e)
            return
        except SegmentStoreError as e:
            if durable:
                raise
            log.warning("%s: reply to %d not written: %s", self, ev.id, e)
            return
        if not durable:
            ack.add_done_callback(_log_failed_ack)

    def _fail_pending(self, error: BaseException) -> None:
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(error)

    async def close(self) -> None:
        """Stop reading replies and serving, fail waiting emits, flush and close the
        writers."""
        if self._closed:
            return
        self._closed = True
        self._fail_pending(ClientClosed("the event bus is closed"))
        tasks = [t for t in (self._reply_task, *self._serving) if t is not None]
        current = asyncio.current_task()
        for t in tasks:
            if t is not current:
                t.cancel()
        await asyncio.gather(*(t for t in tasks if t is not current), return_exceptions=True)
        writers: list[EventWriter | StreamWriter] = list(self._writers.values())
        if self._stream_writer is not None:
            writers.append(self._stream_writer)
        self._writers.clear()
        self._stream_writer = None
        await asyncio.gather(*(w.close() for w in writers), return_exceptions=True)

    async def __aenter__(self) -> EventBus:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _reply_event(request: Event, result: object) -> Event:
    if isinstance(result, Event):
        return result.replace(ref_id=request.id, id=result.id or events.new_event_id())
    if isinstance(result, bytes | bytearray | memoryview):
        data = bytes(result)
    elif isinstance(result, str):
        data = result.encode()
    else:
        data = events.dumps(result)
    return Event(request.name, data, events.new_event_id(), request.id, request.namespace)


def _log_failed_ack(ack: Ack) -> None:
    error = ack.exception()
    if error is not None:
        log.warning("a reply was not stored: %s", error)
