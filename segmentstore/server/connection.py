"""One client connection: bytes in -> commands -> storage -> replies out, within budgets.

The asyncio layer is thin: ``data_received`` feeds the sans-IO decoder and dispatches each
command; appends go to ``appends.py``, reads to ``reads.py``, other requests to handler
tasks. Replies produced in one turn of the event loop are joined into one ``writelines``.

Every request gets a reply or a documented close (reference 12): storage errors map to
their replies (``errors.error_reply``); anything else a handler raises becomes an
``ErrorMessage`` (``errors.internal_error``), and a reply too long to encode becomes an
``ErrorMessage`` with the name cut (``errors.encode_reply``).

Budgets (README "Resource budgets"). What a connection holds is bounded and charged to the
server's store-wide budgets (``budget.py``):

* input: the bytes of a partial frame (the decoder grows its buffer with the bytes that
  arrive, never with the declared length). Over the store-wide input budget, a connection
  holding more than the floor stops reading its socket until the budget has room.
* output: replies queued in this object and in the transport. The transport's high-water
  mark is this connection's fair share of the store-wide output budget (at most
  ``connection_write_buffer_bytes``) less one read; commands wait in the backlog while
  the transport is paused, and reads from chunk files reserve their size before they
  touch the disk, so a client that never reads holds at most its share.
* appends not yet durable (``appends.py``); requests being served (``max_pending_requests``
  tasks at once; more wait in the backlog, and the socket is not read meanwhile).

Timeouts (checked by the server's sweep with an injected clock, ``check_timeouts``): the
first frame (normally Hello) must arrive within ``hello_timeout_s``; a frame must complete
within ``frame_timeout_s`` of its first byte; queued replies that do not drain for
``write_stall_timeout_s`` end the connection. A timed-out connection is aborted (its queued
output dropped), so its memory returns at once.

Contract with the reference (sections 4, 7, 8, 12): Hello first or not at all; any
decoding error, reply-type command, bare Event/PartialEvent, or append-protocol violation
closes the connection without a reply; every reply echoes its request id.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import deque
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, cast

from segmentstore_client.errors import RemoteProtocolError
from segmentstore_client.protocol import (
    MAX_PAYLOAD_TO_SERVER,
    OLDEST_COMPATIBLE_VERSION,
    WIRE_VERSION,
    AppendAssembler,
    AppendBlock,
    AppendBlockEnd,
    Buffer,
    Command,
    ConditionalAppend,
    ConditionalBlockEnd,
    CreateTransientSegment,
    ErrorMessage,
    ErrorReply,
    FrameDecoder,
    Hello,
    KeepAlive,
    Padding,
    ReadSegment,
    Reply,
    SegmentCreated,
    SetupAppend,
    encode,
)
from segmentstore_client.protocol.names import name_problem

from ..storage import (
    ATTRIBUTE_SEGMENT_TYPE,
    NULL_ATTRIBUTE_VALUE,
    SEGMENT_TYPE_TRANSIENT,
    StorageError,
)
from .appends import Appends, WriterState
from .errors import (
    ILLEGAL_ARGUMENT,
    PEER_LOG,
    encode_reply,
    error_reply,
    internal_error,
    name_refusal,
    shown,
)
from .reads import MAX_READ_BYTES, Reads

if TYPE_CHECKING:
    from .server import Server

log = logging.getLogger("segmentstore.server")

_APPEND_DATA = (AppendBlock, AppendBlockEnd, ConditionalAppend, ConditionalBlockEnd, Padding)
MIN_READ_CAP = 64 * 1024


class Connection(asyncio.Protocol):
    def __init__(self, server: Server) -> None:
        self.server = server
        self.ctx = server.ctx
        self.store = server.ctx.store
        self.metrics = server.ctx.metrics
        self.handlers = server.handlers
        self.decoder = FrameDecoder(max_payload=MAX_PAYLOAD_TO_SERVER)
        self.assembler = AppendAssembler()
        self.appends = Appends(self)
        self.reads = Reads(self)
        self.transient: set[str] = set()
        self.auth_check = server.auth.session() if server.auth is not None else None
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.closed = False
        self._aborted = False
        self.loop = asyncio.get_running_loop()
        config = server.config
        self._clock = server.clock
        self._max_pending = config.max_pending_requests
        self._out: list[Buffer] = []
        self._out_bytes = 0
        self._out_charged = 0  # bytes charged to the store-wide output budget
        self._reserved = 0  # bytes reserved by reads on their way from the disk
        self._high = config.connection_write_buffer_bytes
        self.read_cap = MAX_READ_BYTES
        self._room = asyncio.Event()
        self._backlog: deque[Command] = deque()
        self._flush_pending = False
        self._flush_handle: asyncio.Handle | None = None
        self._early = server.early_flush
        self._out_budget = server.output_budget
        self._tasks: set[asyncio.Task[None]] = set()
        self._paused_writes = False
        self._paused_input = False
        self._in_charged = 0  # partial-frame bytes charged to the store-wide input budget
        self._born = self._clock()
        self._first_frame = False
        self._frame_since: float | None = None  # when the partial frame's first byte came
        self._stall_since: float | None = None  # when the transport last paused writing
        self.dispatched_at = time.perf_counter()  # when process() last began (appends.py)

    # --- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports quack like asyncio.Transport without subclassing it.
        transport = cast(asyncio.Transport, transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "?"
        self.metrics.connections += 1
        self.metrics.connections_total += 1
        self.server.connections.add(self)
        self.retune()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.metrics.connections -= 1
        self.server.connections.discard(self)
        for task in self._tasks:
            task.cancel()
        self.appends.release()
        self._out, self._out_bytes = [], 0
        self.server.output_budget.forget(self)
        self.server.output_budget.charge(-self._out_charged)
        self.server.input_budget.forget(self)
        self.server.input_budget.charge(-self._in_charged)
        self._out_charged = self._in_charged = 0
        self._room.set()  # parked reads wake up and find the connection closed
        if self.transient:
            self.server.spawn(self._drop_transient(set(self.transient)))

    def data_received(self, data: bytes) -> None:
        try:
            commands = self.decoder.feed(data)
        except RemoteProtocolError as e:
            self.protocol_error(str(e))
            return
        buffered = self.decoder.buffered
        budget = self.server.input_budget
        if buffered != self._in_charged:
            budget.charge(buffered - self._in_charged)
            self._in_charged = buffered
        if commands:
            self._first_frame = True
        if not buffered:
            self._frame_since = None
        elif commands or self._frame_since is None:
            self._frame_since = self._clock()
        if budget.over and buffered > budget.floor and not self._paused_input:
            self._paused_input = True
            budget.wait(self, self._resume_input)
        if commands:
            if self._backlog:
                self._backlog.extend(commands)
            else:
                self._backlog = deque(commands)
            self.process()
        else:
            self.update_reading()

    def _resume_input(self) -> None:
        self._paused_input = False
        self.update_reading()

    def process(self) -> None:
        """Dispatch decoded commands while the output side keeps up.

        Pausing the socket does not stop commands already decoded from one large read, and
        each read may answer with up to ``read_cap`` bytes: so commands wait here while
        the transport is paused or too many requests are being served, and resume when the
        transport drains (``resume_writing``), a task ends, or our own queue is flushed.
        """
        backlog = self._backlog
        out_budget = self._out_budget
        appends = self.appends
        # One clock read per call, not per append: an append's latency (the metric) starts
        # when its read is dispatched.
        self.dispatched_at = time.perf_counter()
        while backlog and not self.closed:
            # _output_full() only when one of its conditions may hold (the common case
            # costs three comparisons, not a call per command)
            if (
                self._paused_writes
                or self._out_bytes + self._reserved > self._high
                or out_budget.used > out_budget.limit
            ) and self._output_full():
                break
            if len(self._tasks) >= self._max_pending:
                break
            command = backlog.popleft()
            try:
                if type(command) is AppendBlockEnd:  # the append the SDK sends
                    appends.block_end(command)
                else:
                    self.dispatch(command)
            except RemoteProtocolError as e:
                self.protocol_error(str(e))
                return
            except Exception as e:  # no exception escapes a handler: it gets a reply
                self.reply(internal_error(command, e))
        self.update_reading()

    def pause_writing(self) -> None:
        self._paused_writes = True
        self._stall_since = self._clock()
        self._room.clear()
        self.update_reading()

    def resume_writing(self) -> None:
        self._paused_writes = False
        self._stall_since = None
        self._settle_output()
        self._room.set()
        self.process()

    def eof_received(self) -> bool | None:
        return None

    def update_reading(self) -> None:
        if self.transport is None or self.closed:
            return
        if self.appends.paused or self._paused_writes or self._paused_input or self._backlog:
            if self.transport.is_reading():
                self.transport.pause_reading()
        elif not self.transport.is_reading():
            self.transport.resume_reading()

    @property
    def inflight_bytes(self) -> int:
        return self.appends.inflight_bytes

    # --- output -------------------------------------------------------------------------

    def send(self, *parts: Buffer) -> None:
        """Queue a frame (or the pieces of one) for the next write of this loop turn."""
        if self.closed:
            return
        self._out.extend(parts)
        self._queued(sum(map(len, parts)))

    def send_frame(self, frame: bytes) -> None:
        """``send`` of one whole frame (an ack)."""
        if self.closed:
            return
        self._out.append(frame)
        self._queued(len(frame))

    def _queued(self, n: int) -> None:
        self._out_bytes += n
        self._out_charged += n
        self._out_budget.charge(n)
        if not self._flush_pending:
            self._flush_pending = True
            self._flush_handle = self.loop.call_soon(self._flush)
            self._early.add(self)

    def reply(self, reply: Reply) -> None:
        if isinstance(reply, ErrorReply):
            self.metrics.errors[type(reply).__name__] += 1
        self.send(encode_reply(reply))

    def flush_now(self) -> None:
        """Flush before this turn's own flush would run (``early_flush.py``)."""
        if self._flush_pending:
            assert self._flush_handle is not None
            self._flush_handle.cancel()
            self._flush()

    def _flush(self) -> None:
        self._flush_pending = False
        self._flush_handle = None
        self._early.discard(self)
        out, self._out = self._out, []
        self._out_bytes = 0
        if out and not self.closed and self.transport is not None:
            # writelines hands uvloop the pieces for one writev, without joining them.
            self.transport.writelines(out)
        self._settle_output()
        if not self._paused_writes:
            self._room.set()
        if self._backlog:
            self.process()

    def _settle_output(self) -> None:
        """Charge the store-wide output budget with what this connection really holds now
        (the transport sends on its own and only says so when it crosses low water)."""
        transport = self.transport
        held = self._out_bytes
        if transport is not None and not transport.is_closing():
            held += transport.get_write_buffer_size()
        if held != self._out_charged:
            self.server.output_budget.charge(held - self._out_charged)
            self._out_charged = held

    def _output_full(self) -> bool:
        if self._paused_writes or self._out_bytes + self._reserved > self._high:
            return True
        budget = self.server.output_budget
        if budget.over and self._out_charged > budget.floor:
            budget.wait(self, self._budget_room)
            return True
        return False

    def _budget_room(self) -> None:
        self._room.set()
        self.process()

    async def reserve_output(self, size: int) -> None:
        """Wait until this connection's output has room for ``size`` more bytes (one
        reservation always goes while nothing else is reserved)."""
        while not self.closed and (self._paused_writes or (self._reserved and self._output_full())):
            self._room.clear()
            await self._room.wait()
        self._reserved += size

    def release_output(self, size: int) -> None:
        self._reserved -= size
        self._room.set()

    def retune(self) -> None:
        """Fit the high-water mark and the read cap to this connection's fair share."""
        share = self.server.output_budget.fair_share(len(self.server.connections))
        self.read_cap = min(MAX_READ_BYTES, max(MIN_READ_CAP, share // 2))
        high = min(self.server.config.connection_write_buffer_bytes, share - self.read_cap)
        self._high = max(MIN_READ_CAP, high)
        if self.transport is not None and not self.transport.is_closing():
            self.transport.set_write_buffer_limits(high=self._high)

    def close(self) -> None:
        """Close after flushing what is queued."""
        if self.closed or self.transport is None:
            return
        self._flush()
        self.closed = True
        self.transport.close()

    def abort(self, why: str) -> None:
        """Drop the connection and whatever it has queued (a timeout, a stalled peer)."""
        PEER_LOG(logging.INFO, "closing connection from %s: %s", self.peer, why)
        self.closed = self._aborted = True
        self._backlog.clear()
        if self.transport is not None:
            self.transport.abort()

    def protocol_error(self, why: str) -> None:
        self.metrics.protocol_errors += 1
        PEER_LOG(logging.WARNING, "closing connection from %s: %s", self.peer, why)
        self.close()

    def check_timeouts(self, now: float) -> None:
        """Abort the connection if a timeout has passed (called by the server's sweep)."""
        c = self.server.config
        if self.transport is None or self._aborted:
            return
        if not self._first_frame and now - self._born > c.hello_timeout_s:
            kind, why = "hello", f"no request within {c.hello_timeout_s:g}s"
        elif self._frame_since is not None and now - self._frame_since > c.frame_timeout_s:
            kind, why = "frame", f"a frame still incomplete after {c.frame_timeout_s:g}s"
        elif self._stall_since is not None and now - self._stall_since > c.write_stall_timeout_s:
            kind, why = "write", f"replies not read for {c.write_stall_timeout_s:g}s"
        else:
            if not self.closed:
                self._settle_output()
                self.retune()
            return
        self.metrics.timeouts[kind] += 1
        self.abort(why)

    # --- dispatch -----------------------------------------------------------------------

    def dispatch(self, command: Command) -> None:
        kind = type(command)
        if kind is AppendBlockEnd:  # the append the SDK sends: checked first
            self.appends.block_end(command)  # type: ignore[arg-type]
            return
        if kind in _APPEND_DATA or self.assembler.block_open:
            self.appends.data(command)
            return
        self.metrics.requests[kind.__name__] += 1
        refusal: Reply | None = name_refusal(command)
        if refusal is None and self.auth_check is not None:  # auth = on (README "Security")
            refusal = self.auth_check(command)
        if refusal is not None:
            self.reply(refusal)
        elif kind is ReadSegment:
            self.reads.read_now(command)  # type: ignore[arg-type]
        elif kind is SetupAppend:
            self.appends.setup(command)  # type: ignore[arg-type]
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
        task = self.loop.create_task(self._guarded(command, coro))
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if self._backlog and not self.closed:
            self.process()

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
            PEER_LOG(
                logging.WARNING,
                "incompatible client %s (versions %d..%d); closing",
                self.peer,
                command.low_version,
                command.high_version,
            )
            self.close()

    # --- transient segments -------------------------------------------------------------

    async def create_transient(self, command: CreateTransientSegment) -> None:
        w = command.writer_id.int
        name = (
            f"{command.parent_segment}#transient."
            f"{w >> 64:016x}{w & 0xFFFFFFFFFFFFFFFF:016x}.{secrets.token_hex(16)}"
        )
        problem = name_problem(name)
        if problem is not None:
            why = f"invalid transient segment name: {problem}"
            rid = command.request_id
            self.reply(ErrorMessage(rid, shown(command.parent_segment), why, ILLEGAL_ARGUMENT))
            return
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
