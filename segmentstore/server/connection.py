"""One client connection: bytes in -> commands -> storage -> replies out.

The asyncio layer is thin: ``data_received`` feeds the sans-IO decoder and dispatches each
command. Appends never get a task of their own: the store returns a future per append
and a done-callback sends the acknowledgement, so acks leave in commit order. Replies
produced in one turn of the event loop are joined into a single ``transport.write``.

Backpressure: when the bytes of appends not yet durable exceed a bound, or the transport's
write buffer is full (a slow reader), the connection stops reading its socket until the
log or the peer catches up. Nothing queues without bound.

Contract with the reference (sections 4, 7, 8, 12): Hello first or not at all; any
decoding error, reply-type command, bare Event/PartialEvent, or append-protocol violation
closes the connection without a reply; every reply echoes its request id.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import secrets
import time
import uuid
from collections import deque
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, cast

from segmentstore_client.errors import RemoteProtocolError
from segmentstore_client.protocol import (
    MAX_PAYLOAD_TO_SERVER,
    OLDEST_COMPATIBLE_VERSION,
    WIRE_VERSION,
    Append,
    AppendAssembler,
    AppendBlock,
    AppendBlockEnd,
    AppendSetup,
    Buffer,
    Command,
    ConditionalAppend,
    ConditionalBlockEnd,
    ConditionalCheckFailed,
    CreateTransientSegment,
    DataAppended,
    ErrorMessage,
    ErrorReply,
    FrameDecoder,
    Hello,
    InvalidEventNumber,
    KeepAlive,
    NoSuchSegment,
    OperationUnsupported,
    Padding,
    ReadSegment,
    Reply,
    SegmentCreated,
    SegmentIsSealed,
    SegmentRead,
    SetupAppend,
    encode,
    segment_read_parts,
)

from ..storage import (
    ATTRIBUTE_SEGMENT_TYPE,
    NULL_ATTRIBUTE_VALUE,
    SEGMENT_TYPE_TABLE,
    SEGMENT_TYPE_TRANSIENT,
    AppendResult,
    BadAttributeUpdate,
    BadOffset,
    InvalidOffset,
    ReadResult,
    SegmentNotFound,
    SegmentSealed,
    StorageError,
)
from .errors import encode_reply, error_reply, internal_error, name_refusal

if TYPE_CHECKING:
    from .server import Server

log = logging.getLogger("segmentstore.server")

MAX_READ_BYTES = 2 * 1024 * 1024
# Below this a read's data is joined into its frame; above, it goes out as its own piece.
_ZERO_COPY_READ_BYTES = 16 * 1024
_APPEND_DATA = (AppendBlock, AppendBlockEnd, ConditionalAppend, ConditionalBlockEnd, Padding)


class WriterState:
    """One writer's append session on this connection (reference 7.6).

    ``queue`` holds the writer's submitted appends in order. Outcomes are handled only from
    its head, so acknowledgements and the error that ends the session leave in submission
    order even though the store fails a doomed append (e.g. on a sealed segment) at once,
    while earlier ones are still on their way to disk.
    """

    __slots__ = ("drain", "failed", "last_acked", "last_stored", "queue", "segment")

    def __init__(
        self, segment: str, last: int, on_done: Callable[[WriterState, object], None]
    ) -> None:
        self.segment = segment
        self.last_stored = last  # highest event number submitted to the store
        self.last_acked = last  # highest event number acknowledged
        self.failed = False  # an error ended the session; later outcomes are dropped
        self.queue: deque[tuple[asyncio.Future[AppendResult], Append, float]] = deque()
        # Done-callback of every append future of this writer (one object, made once).
        self.drain: Callable[[object], None] = functools.partial(on_done, self)


class Connection(asyncio.Protocol):
    def __init__(self, server: Server) -> None:
        self.server = server
        self.ctx = server.ctx
        self.store = server.ctx.store
        self.metrics = server.ctx.metrics
        self.handlers = server.handlers
        self.decoder = FrameDecoder(max_payload=MAX_PAYLOAD_TO_SERVER)
        self.assembler = AppendAssembler()
        self.writers: dict[uuid.UUID, WriterState] = {}
        self.transient: set[str] = set()
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.closed = False
        self._loop = asyncio.get_running_loop()
        self._out: list[Buffer] = []
        self._out_bytes = 0
        self._out_limit = server.config.connection_write_buffer_bytes
        self._backlog: deque[Command] = deque()
        self._flush_pending = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._inflight_bytes = 0
        self._inflight_limit = server.config.connection_inflight_bytes
        self._paused_appends = False
        self._paused_writes = False

    # --- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports quack like asyncio.Transport without subclassing it.
        transport = cast(asyncio.Transport, transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        transport.set_write_buffer_limits(high=self.server.config.connection_write_buffer_bytes)
        self.metrics.connections += 1
        self.metrics.connections_total += 1
        self.server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.metrics.connections -= 1
        self.server.connections.discard(self)
        for task in self._tasks:
            task.cancel()
        if self.transient:
            self.server.spawn(self._drop_transient(set(self.transient)))

    def data_received(self, data: bytes) -> None:
        try:
            commands = self.decoder.feed(data)
        except RemoteProtocolError as e:
            self.protocol_error(str(e))
            return
        if self._backlog:
            self._backlog.extend(commands)
        else:
            self._backlog = deque(commands)
        self._process()

    def _process(self) -> None:
        """Dispatch decoded commands while the output side keeps up.

        Pausing the socket does not stop commands already decoded from one large read, and
        each read may answer with 2 MiB: so commands wait here while queued output is above
        the high-water mark, and resume when the transport drains (``resume_writing``) or
        when our own queue is flushed.
        """
        backlog = self._backlog
        while backlog and not self.closed:
            if self._paused_writes or self._out_bytes > self._out_limit:
                break
            command = backlog.popleft()
            try:
                self.dispatch(command)
            except RemoteProtocolError as e:
                self.protocol_error(str(e))
                return
            except Exception as e:  # no exception escapes a handler: it gets a reply
                self.reply(internal_error(command, e))
        self._update_reading()

    def pause_writing(self) -> None:
        self._paused_writes = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._paused_writes = False
        self._process()

    def eof_received(self) -> bool | None:
        return None

    # --- output -------------------------------------------------------------------------

    def send(self, *parts: Buffer) -> None:
        """Queue a frame (or the pieces of one) for the next write of this loop turn."""
        if self.closed:
            return
        out = self._out
        for part in parts:
            out.append(part)
            self._out_bytes += len(part)
        if not self._flush_pending:
            self._flush_pending = True
            self._loop.call_soon(self._flush)

    def reply(self, reply: Reply) -> None:
        if isinstance(reply, ErrorReply):
            self.metrics.errors[type(reply).__name__] += 1
        self.send(encode_reply(reply))

    def _flush(self) -> None:
        self._flush_pending = False
        out, self._out = self._out, []
        self._out_bytes = 0
        if out and not self.closed and self.transport is not None:
            # writelines hands uvloop the pieces for one writev, without joining them.
            self.transport.writelines(out)
        if self._backlog:
            self._process()

    def close(self) -> None:
        """Close after flushing what is queued."""
        if self.closed or self.transport is None:
            return
        self._flush()
        self.closed = True
        self.transport.close()

    def protocol_error(self, why: str) -> None:
        self.metrics.protocol_errors += 1
        log.warning("closing connection from %s: %s", self.peer, why)
        self.close()

    # --- dispatch -----------------------------------------------------------------------

    def dispatch(self, command: Command) -> None:
        kind = type(command)
        if kind in _APPEND_DATA or self.assembler.block_open:
            append = self.assembler.feed(command)
            if append is not None:
                self.on_append(append)
            return
        self.metrics.requests[kind.__name__] += 1
        refusal = name_refusal(command)
        if refusal is not None:
            self.reply(refusal)
        elif kind is ReadSegment:
            self.read_now(command)  # type: ignore[arg-type]
        elif kind is SetupAppend:
            self.setup_append(command)  # type: ignore[arg-type]
        elif kind is Hello:
            self.hello(command)  # type: ignore[arg-type]
        elif kind is KeepAlive:
            self.send(encode(KeepAlive()))
        elif kind is CreateTransientSegment:
            self.spawn(command, self.create_transient(command))  # type: ignore[arg-type]
        else:
            handler = self.handlers.get(kind)
            if handler is None:
                raise RemoteProtocolError(f"{kind.__name__} is not a request this server takes")
            self.spawn(command, self.serve(handler, command))

    def spawn(self, command: Command, coro: Coroutine[Any, Any, None]) -> None:
        task = self._loop.create_task(self._guarded(command, coro))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _guarded(self, command: Command, coro: Coroutine[Any, Any, None]) -> None:
        """Run a request's task; whatever it raises becomes an ErrorMessage, never a
        "Task exception was never retrieved"."""
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self.reply(internal_error(command, e))

    def fail(self, command: Command, exc: StorageError) -> None:
        """Answer ``command`` with the error reply for ``exc`` (or close, per 12.1)."""
        reply = error_reply(command, exc)
        if reply is None:
            self.close()
        else:
            self.reply(reply)

    async def serve(self, handler: Any, command: Command) -> None:
        try:
            reply = await handler(self.ctx, command)
        except StorageError as e:
            reply = error_reply(command, e)
        if reply is None:
            self.close()
        else:
            self.reply(reply)

    def hello(self, command: Hello) -> None:
        self.send(encode(Hello(WIRE_VERSION, OLDEST_COMPATIBLE_VERSION)))
        if command.low_version > WIRE_VERSION or command.high_version < OLDEST_COMPATIBLE_VERSION:
            log.warning(
                "incompatible client %s (versions %d..%d); closing",
                self.peer,
                command.low_version,
                command.high_version,
            )
            self.close()

    # --- appends (reference section 7) --------------------------------------------------

    def setup_append(self, command: SetupAppend) -> None:
        writer, segment = command.writer_id, command.segment
        self.assembler.setup(writer, segment)
        self.writers.pop(writer, None)
        try:
            info = self.store.info(segment)
            last = self.store.get_attribute(segment, writer)
        except StorageError as e:
            self.fail(command, e)
            return
        if info.segment_type & SEGMENT_TYPE_TABLE:
            # Only the table layer writes a table segment's entry log.
            self.reply(OperationUnsupported(command.request_id, "appending to a table segment", ""))
            return
        self.writers[writer] = WriterState(segment, last, self._drain)
        self.send(encode(AppendSetup(command.request_id, segment, writer, last)))

    def on_append(self, append: Append) -> None:
        state = self.writers.get(append.writer_id)
        if state is None or state.segment != append.segment:
            raise RemoteProtocolError(f"data for writer {append.writer_id} with no append session")
        if append.event_number > state.last_stored:
            state.last_stored = append.event_number
        future = self.store.append(
            append.segment,
            append.data,
            writer_id=append.writer_id,
            event_number=append.event_number,
            event_count=append.event_count,
            expected_offset=append.expected_offset,
        )
        self._inflight_bytes += len(append.data)
        if self._inflight_bytes > self._inflight_limit and not self._paused_appends:
            self._paused_appends = True
            self._update_reading()
        state.queue.append((future, append, time.perf_counter()))
        future.add_done_callback(state.drain)

    def _drain(self, state: WriterState, _: object = None) -> None:
        """Handle the writer's finished appends from the head of its queue, in order."""
        queue = state.queue
        while queue and queue[0][0].done():
            future, append, started = queue.popleft()
            self._inflight_bytes -= len(append.data)
            if not future.cancelled():
                exc = future.exception()
                if exc is None:
                    self.appended(state, append, future.result(), started)
                else:
                    self.append_failed(state, append, exc)
        if self._paused_appends and self._inflight_bytes <= self._inflight_limit // 2:
            self._paused_appends = False
            self._process()

    def appended(
        self, state: WriterState, append: Append, result: AppendResult, started: float
    ) -> None:
        m = self.metrics
        if result.duplicate:
            m.duplicate_appends += 1
        else:
            m.appends += 1
            m.events += append.event_count
            m.append_bytes += len(append.data)
        m.append_latency.observe(time.perf_counter() - started)
        number = append.event_number
        if number > state.last_acked and not state.failed:
            previous, state.last_acked = state.last_acked, number
            self.send(
                encode(
                    DataAppended(
                        append.writer_id, number, previous, append.request_id, result.new_length
                    )
                )
            )

    def append_failed(self, state: WriterState, append: Append, exc: BaseException) -> None:
        writer, rid, number = append.writer_id, append.request_id, append.event_number
        if state.failed:
            return  # only the earliest failure of a session is reported
        if isinstance(exc, BadOffset):
            # The writer stays set up; later appends are judged on what is durable.
            self.metrics.errors["ConditionalCheckFailed"] += 1
            self.send(encode(ConditionalCheckFailed(writer, number, rid)))
            return
        state.failed = True
        if self.writers.get(writer) is state:
            del self.writers[writer]
            self.assembler.forget(writer)
        if isinstance(exc, SegmentSealed):
            self.reply(SegmentIsSealed(rid, append.segment, "", number))
        elif isinstance(exc, SegmentNotFound):
            self.reply(NoSuchSegment(rid, append.segment, "", -1))
        elif isinstance(exc, BadAttributeUpdate):
            self.reply(InvalidEventNumber(writer, rid, "", number))
            self.close()
        elif isinstance(exc, StorageError) and not exc.retriable:
            self.reply(ErrorMessage(rid, append.segment, str(exc), 0))
        else:
            # I/O trouble: the client reconnects, learns what is durable from AppendSetup
            # and resends the rest, which is exactly the recovery a transient failure needs.
            log.warning("append to %s failed (%s); closing %s", append.segment, exc, self.peer)
            self.close()

    def _update_reading(self) -> None:
        if self.transport is None or self.closed:
            return
        if self._paused_appends or self._paused_writes or self._backlog:
            if self.transport.is_reading():
                self.transport.pause_reading()
        elif not self.transport.is_reading():
            self.transport.resume_reading()

    @property
    def inflight_bytes(self) -> int:
        return self._inflight_bytes

    # --- reads (reference section 8) ----------------------------------------------------

    def read_now(self, command: ReadSegment) -> None:
        """Answer from memory without a task when possible; else park the read in a task."""
        size = min(MAX_READ_BYTES, max(8, command.suggested_length))
        try:
            result = self.store.try_read(command.segment, command.offset, size)
        except InvalidOffset as e:
            # Past the end: a future read if the segment can still grow (reference 8.1).
            try:
                sealed = self.store.info(command.segment).sealed
            except StorageError as gone:
                self.fail(command, gone)
                return
            if sealed:
                self.fail(command, e)
            else:
                self.spawn(command, self.read_segment(command))
            return
        except StorageError as e:
            self.fail(command, e)
            return
        if result is None or (not result.data and result.at_tail):
            self.spawn(command, self.read_segment(command))
        else:
            self.send_read(command, result)

    def send_read(self, command: ReadSegment, result: ReadResult) -> None:
        data = result.data
        self.metrics.reads += 1
        self.metrics.read_bytes += len(data)
        args = (command.segment, command.offset, result.at_tail, result.end_of_segment, data)
        if len(data) >= _ZERO_COPY_READ_BYTES:
            self.send(*segment_read_parts(*args, command.request_id))
        else:
            self.send(encode(SegmentRead(*args, command.request_id)))

    async def read_segment(self, command: ReadSegment) -> None:
        """A read that needs the disk, or waits at (or past) the tail of an open segment."""
        segment, offset, rid = command.segment, command.offset, command.request_id
        size = min(MAX_READ_BYTES, max(8, command.suggested_length))
        store = self.store
        try:
            info = store.info(segment)
            if offset >= info.length and not info.sealed:
                await store.wait_for_data(segment, offset, self.ctx.tail_read_timeout)
                try:
                    info = store.info(segment)
                except SegmentNotFound:
                    # Deleted while the read was parked: an empty tail read, as Java does.
                    self.reply(SegmentRead(segment, offset, True, False, b"", rid))
                    return
                if offset >= info.length:
                    if info.sealed and offset == info.length:
                        self.reply(SegmentIsSealed(rid, segment, "", offset))
                    elif info.sealed:
                        self.fail(
                            command, InvalidOffset(segment, f"read at {offset} beyond the end")
                        )
                    else:  # nothing arrived in time: an empty read at the tail
                        self.reply(SegmentRead(segment, offset, True, False, b"", rid))
                    return
            result = await store.read(segment, offset, size)
        except StorageError as e:
            self.fail(command, e)
            return
        self.send_read(command, result)

    # --- transient segments -------------------------------------------------------------

    async def create_transient(self, command: CreateTransientSegment) -> None:
        w = command.writer_id.int
        name = (
            f"{command.parent_segment}#transient."
            f"{w >> 64:016x}{w & 0xFFFFFFFFFFFFFFFF:016x}.{secrets.token_hex(16)}"
        )
        try:
            self.store.info(command.parent_segment)
            await self.store.create_segment(
                name,
                segment_type=SEGMENT_TYPE_TRANSIENT,
                attributes={ATTRIBUTE_SEGMENT_TYPE: SEGMENT_TYPE_TRANSIENT},
            )
        except StorageError as e:
            self.fail(command, e)
            return
        self.transient.add(name)
        self.reply(SegmentCreated(command.request_id, name))

    async def _drop_transient(self, names: set[str]) -> None:
        for name in names:
            if self.store.exists(name):
                try:
                    await self.store.delete(name)
                except StorageError as e:
                    log.warning("could not delete transient segment %s: %s", name, e)


__all__ = ["NULL_ATTRIBUTE_VALUE", "Connection", "WriterState"]
