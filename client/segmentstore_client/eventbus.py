"""Request/reply over segments with namespaced events: ``client.events(scope)``.

Every message is one namespaced event (:mod:`segmentstore_client.formats.events`) stored
as one segment event. The segments of a scope::

    {scope}/requests/{p}        requests, p = 0 .. partitions-1; one handler process
                                reads each (``serve(p)``); emitters spread over them
    {scope}/replies/{prefix}    replies to one emitter; ``prefix`` is the upper 32 bits
                                (8 hex digits) of every event id that emitter makes

An emitter's event ids are ``prefix << 32 | counter`` with a random per-bus prefix, so a
handler knows where to reply from the request's id alone (the event format has no
reply-to field). When streams exist, :meth:`EventBus.request_segment` and
:meth:`EventBus.reply_segment` are the two places a stream takes over.

Behaviour, as the event format specifies it:

- an incoming event whose ref id is the id of an emitted event still waiting for its
  reply completes that wait; otherwise it is handled as a regular event;
- a regular event goes to the handler registered for its name (no namespace), or for
  its name in its namespace; with no such handler it is ignored (and counted in
  ``ignored``);
- a handler's return value is emitted as the reply (ref id = the request's id, same
  name and namespace): ``bytes`` as they are, ``str`` as UTF-8, an
  :class:`~segmentstore_client.formats.events.Event` as given (its ref id set), None
  for no reply, anything else as a JSON serde payload.

A handler reads its request segment from the end it has when ``serve`` starts (or from
``offset=``); replies are read from the end of the emitter's reply segment. A request is
written durably before ``emit`` waits for its reply.

Example::

    bus = client.events("shop")
    @bus.handler("price", namespace="catalog")
    async def price(ev):
        return b"9.99"
    server = asyncio.create_task(bus.serve(0))       # in a handler process
    reply = await bus.emit("price", b"sku-1", namespace="catalog", timeout=5)
    print(reply.data)                                # b"9.99"
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from .errors import ClientClosed, SegmentStoreError, Timeout
from .formats import events
from .formats.errors import FormatError
from .formats.events import Event

if TYPE_CHECKING:
    from .client import Client
    from .reader import EventReader
    from .writer import Ack, EventWriter

log = logging.getLogger("segmentstore_client.eventbus")

Handler = Callable[[Event], Any]
H = TypeVar("H", bound=Handler)


class EventBus:
    """An emitter and a handler registry over the segments of ``scope`` (module
    docstring). Make one with ``client.events(scope, partitions=1)``."""

    def __init__(self, client: Client, scope: str, *, partitions: int = 1) -> None:
        if partitions < 1:
            raise ValueError("partitions must be at least 1")
        self.client = client
        self.scope = scope
        self.partitions = partitions
        self.prefix = int.from_bytes(os.urandom(4), "big")
        self.ignored = 0
        """Events no handler took (unknown name or namespace)."""
        self.handled = 0
        self._ids = itertools.count(1)
        self._rr = itertools.count()
        self._global: dict[str, Handler] = {}
        self._namespaces: dict[str, dict[str, Handler]] = {}
        self._pending: dict[int, asyncio.Future[Event]] = {}
        self._writers: dict[str, EventWriter] = {}
        self._reply_task: asyncio.Task[None] | None = None
        self._serving: set[asyncio.Task[Any]] = set()
        self._started: asyncio.Future[None] | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"<EventBus {self.scope} prefix={self.prefix:08x}>"

    # -- naming (where streams will take over) -------------------------------------------

    def request_segment(self, partition: int) -> str:
        return f"{self.scope}/requests/{partition}"

    def reply_segment(self, prefix: int) -> str:
        return f"{self.scope}/replies/{prefix:08x}"

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
        return self.prefix << 32 | (next(self._ids) & 0xFFFFFFFF)

    async def start(self) -> EventBus:
        """Create the reply segment and start reading it (``emit`` calls this)."""
        if self._closed:
            raise ClientClosed("the event bus is closed")
        if self._started is None:
            self._started = asyncio.get_running_loop().create_future()
            try:
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
    ) -> Event | int:
        """Write an event to a request segment (``partition``, or the next one in turn).
        With ``wait_reply`` return the reply :class:`Event` (raises :class:`Timeout`
        after ``timeout`` seconds); without, return the event's id.

        Example::

            reply = await bus.emit("ping", b"", namespace="health", timeout=5)
        """
        await self.start()
        p = next(self._rr) % self.partitions if partition is None else partition
        ev_id = self.new_id()
        data = events.encode_event(name, payload, id=ev_id, namespace=namespace)
        if not wait_reply:
            await self._write(self.request_segment(p), data, durable=True)
            return ev_id
        fut: asyncio.Future[Event] = asyncio.get_running_loop().create_future()
        self._pending[ev_id] = fut
        try:
            await self._write(self.request_segment(p), data, durable=True)
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            raise Timeout(f"no reply to {name!r} (id {ev_id}) within {timeout} s") from None
        finally:
            self._pending.pop(ev_id, None)

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

    async def serve(self, partition: int = 0, *, offset: int | None = None) -> None:
        """Handle the requests of ``partition`` until cancelled or :meth:`close`: read
        from the segment's end (or ``offset``), dispatch, emit the replies.

        Example::

            await bus.serve(0)          # one handler process per partition
        """
        if self._closed:
            raise ClientClosed("the event bus is closed")
        task = asyncio.current_task()
        if task is not None:
            self._serving.add(task)
        try:
            seg = self.request_segment(partition)
            await self.client.create_segment(seg, exist_ok=True)
            if offset is None:
                offset = (await self.client.segment_info(seg)).length
            await self._pump(self.client.reader(seg, offset, follow=True), serving=True)
        finally:
            self._serving.discard(task)  # type: ignore[arg-type]

    async def _pump(self, reader: EventReader, *, serving: bool) -> None:
        try:
            async for batch in reader.batches():
                for raw in batch:
                    try:
                        ev = events.decode_event(raw.data)
                    except FormatError as e:
                        log.warning("%s: skipped a damaged event at %d: %s", self, raw.offset, e)
                        continue
                    await self._dispatch(ev)
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

    async def _dispatch(self, ev: Event) -> None:
        if ev.ref_id is not None:
            fut = self._pending.get(ev.ref_id)
            if fut is not None:
                if not fut.done():
                    fut.set_result(ev)
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
            ack = await self._write(self.reply_segment(ev.id >> 32), reply.encode())
        except SegmentStoreError as e:
            log.warning("%s: reply to %d not written: %s", self, ev.id, e)
            return
        ack.add_done_callback(_log_failed_ack)

    def _fail_pending(self, error: BaseException) -> None:
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(error)

    async def close(self) -> None:
        """Stop reading replies, fail waiting emits, flush and close the writers."""
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
        writers = list(self._writers.values())
        self._writers.clear()
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
