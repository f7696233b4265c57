"""The append path of one connection (reference section 7): append sessions per writer,
appends handed to the store, acknowledgements in order, and append backpressure.

Each writer's session follows the transition table of ``append_session.py``: this module
classifies what happens (SetupAppend answered, data new / resent / repeated, the store's
outcome) into an event, asks ``step`` for the action, and carries it out.

Appends never get a task of their own: the store returns a future per append and a
done-callback acknowledges it, so acknowledgements leave in commit order. Each writer's
appends are handled from the head of its queue only, so acknowledgements and the error
that ends a session leave in submission order even though the store fails a doomed append
(e.g. on a sealed segment) at once, while earlier ones are still on their way to disk.

Hot path (issue 19): an end-only AppendBlockEnd (what the SDK sends for every append) in
the common case (an open session, an event number above all stored) goes to the store in
one call (``block_end``) and its ack is packed straight from the numbers
(``data_appended_frame``); every other case takes the general path (``data``), so the
outcome of any frame is the same either way.

Backpressure: the bytes of appends not yet durable are charged to the connection (bound
``connection_inflight_bytes``) and to the store-wide inflight budget; over either, the
connection stops reading its socket until the log catches up (resumes at half).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from segmentstore_client.errors import RemoteProtocolError
from segmentstore_client.protocol import (
    Append,
    AppendBlockEnd,
    AppendSetup,
    Command,
    ConditionalAppend,
    ConditionalBlockEnd,
    ConditionalCheckFailed,
    ErrorMessage,
    InvalidEventNumber,
    NoSuchSegment,
    OperationUnsupported,
    SegmentIsSealed,
    SetupAppend,
    data_appended_frame,
    encode,
)

from ..storage import (
    NULL_ATTRIBUTE_VALUE,
    SEGMENT_TYPE_TABLE,
    AppendResult,
    BadAttributeUpdate,
    BadOffset,
    SegmentNotFound,
    SegmentSealed,
    StorageError,
)
from .append_session import Action, Event, Session, SessionViolation, classify, step
from .errors import UNSPECIFIED

if TYPE_CHECKING:
    from ..storage.store import AppendFn
    from .connection import Connection

log = logging.getLogger("segmentstore.server")

_OPEN = Session.OPEN  # in OPEN, DATA -> (OPEN, STORE) and STORED -> (OPEN, ACK): the hot path


# One append on its way, in its writer's queue: (future, last event number, event count,
# bytes, request id, perf_counter when its read was dispatched). A plain tuple: the hot
# path builds one per append, and the ack needs nothing else.
Queued = tuple["asyncio.Future[AppendResult]", int, int, int, int, float]


class WriterState:
    """One writer's append session on this connection (reference 7.6)."""

    __slots__ = (
        "append",
        "drain",
        "last_acked",
        "last_stored",
        "queue",
        "segment",
        "session",
        "setup",
        "wid",
        "writer",
    )

    def __init__(
        self,
        segment: str,
        writer: uuid.UUID,
        last: int,
        on_done: Callable[[WriterState, object], None],
        append: AppendFn,
    ) -> None:
        self.segment = segment
        self.writer = writer
        self.wid = writer.bytes  # for the acks (UUID.bytes is computed on every access)
        self.append = append  # the segment's container's append (store.appender)
        self.session = Session.OPEN
        self.setup = last  # the event number AppendSetup returned: durable before we began
        self.last_stored = last  # highest event number submitted to the store (>= setup)
        self.last_acked = last  # highest event number acknowledged
        self.queue: deque[Queued] = deque()
        # Done-callback of every append future of this writer (one object, made once).
        self.drain: Callable[[object], None] = functools.partial(on_done, self)

    @property
    def failed(self) -> bool:
        return self.session is not Session.OPEN

    def step(self, event: Event) -> Action:
        self.session, action = step(self.session, event)
        return action


class Appends:
    """The append sessions of one connection."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.store = conn.store
        self.metrics = conn.metrics
        # Keyed by the writer id's int: a UUID hashes in Python (a call per append).
        self.writers: dict[int, WriterState] = {}
        self.inflight_bytes = 0
        self.inflight_limit = conn.server.config.connection_inflight_bytes
        self.budget = conn.server.inflight_budget
        self.max_writers = conn.server.config.max_writers_per_connection
        self.store_writers = conn.server.config.store_writers
        self.paused = False  # reading paused until enough appends are durable
        self.context = contextvars.copy_context()

    def setup(self, command: SetupAppend) -> None:
        conn = self.conn
        writer, segment = command.writer_id, command.segment
        reason = self._too_many_writers(writer)
        if reason is not None:
            conn.reply(ErrorMessage(command.request_id, segment, reason, UNSPECIFIED))
            return
        conn.assembler.setup(writer, segment)
        old = self.writers.pop(writer.int, None)
        previous = old.session if old is not None else Session.NEW
        try:
            info = self.store.info(segment)
            last = self.store.get_attribute(segment, writer)
        except StorageError as e:
            step(previous, Event.SETUP_REFUSED)
            conn.fail(command, e)
            return
        if info.segment_type & SEGMENT_TYPE_TABLE:
            # Only the table layer writes a table segment's entry log.
            step(previous, Event.SETUP_REFUSED)
            conn.reply(OperationUnsupported(command.request_id, "appending to a table segment", ""))
            return
        step(previous, Event.SETUP)
        appender = self.store.appender(segment)
        self.writers[writer.int] = WriterState(segment, writer, last, self._drain, appender)
        conn.send(encode(AppendSetup(command.request_id, segment, writer, last)))

    def _too_many_writers(self, writer: uuid.UUID) -> str | None:
        """Why a SetupAppend for ``writer`` is refused, or None. Every writer id costs memory
        for the connection's life (its session and the assembler's entry, made even when
        the setup is refused), so new ones are refused past the connection's cap and past
        the store-wide one; a writer set up before is never refused, and the connection
        stays up. The store-wide count is summed over the connections only when this one
        holds more than 64 writers, so ordinary setups pay nothing for it."""
        assembler = self.conn.assembler
        count = assembler.writer_count()
        if assembler.knows(writer):
            return None
        if count >= self.max_writers:
            return f"too many append sessions on this connection (max {self.max_writers})"
        if count < 64:
            return None
        connections = self.conn.server.connections
        if sum(c.assembler.writer_count() for c in connections) >= self.store_writers:
            return f"too many append sessions on this server (max {self.store_writers})"
        return None

    def block_end(self, end: AppendBlockEnd) -> None:
        """An AppendBlockEnd. The common case skips what cannot apply to it: with no block
        open, an open session and an event number above all stored, ``precheck`` passes,
        ``classify`` says DATA and the table says (OPEN, STORE)."""
        state = self.writers.get(end.writer_id.int)
        number = end.last_event_number
        if state is None or state.session is not _OPEN or number <= state.last_stored:
            self.data(end)
            return
        segment = self.conn.assembler.take_end_only(end)
        if segment is None:  # a block is open: the general path joins it
            self.data(end)
            return
        if state.segment != segment:
            raise RemoteProtocolError(f"data for writer {end.writer_id} with no append session")
        state.last_stored = number
        # No Append object: the store and the queue take the frame's fields as they are.
        count, data = end.num_events, end.data
        future = state.append(segment, data, end.writer_id, number, count, None)
        self._track(state, future, number, count, len(data), end.request_id)

    def data(self, command: Command) -> None:
        """Any append data command (the general path)."""
        if self.precheck(command):
            append = self.conn.assembler.feed(command)
            if append is not None:
                self.append(append)

    def precheck(self, command: Command) -> bool:
        """Before the assembler sees a data command: an event number going back below one
        this session already sent is REPEATED (InvalidEventNumber and close). Returns
        False when the command was rejected."""
        if isinstance(command, AppendBlockEnd):
            number = command.last_event_number
        elif isinstance(command, ConditionalAppend | ConditionalBlockEnd):
            number = command.event_number
        else:
            return True
        state = self.writers.get(command.writer_id.int)
        if state is None or state.last_stored <= state.setup or number >= state.last_stored:
            return True
        state.step(Event.REPEATED)
        self._reject(state, command.writer_id, command.request_id, number)
        return False

    def _reject(self, state: WriterState, writer: uuid.UUID, rid: int, number: int) -> None:
        if self.writers.get(writer.int) is state:
            del self.writers[writer.int]
        self.conn.reply(InvalidEventNumber(writer, rid, "", number))
        self.conn.close()

    def append(self, append: Append) -> None:
        state = self.writers.get(append.writer_id.int)
        if state is None or state.segment != append.segment:
            raise RemoteProtocolError(f"data for writer {append.writer_id} with no append session")
        number = append.event_number
        try:
            action = state.step(classify(number, state.setup, state.last_stored))
        except SessionViolation as e:
            raise RemoteProtocolError(f"writer {append.writer_id}: {e}") from e
        if action is Action.REJECT:
            self._reject(state, append.writer_id, append.request_id, number)
            return
        if action is Action.ACK_WITHOUT_STORING:
            future: asyncio.Future[AppendResult] = self.conn.loop.create_future()
            future.set_result(AppendResult(self.store.info(append.segment).length, True))
        else:
            state.last_stored = number
            future = state.append(
                append.segment,
                append.data,
                append.writer_id,
                number,
                append.event_count,
                append.expected_offset,
            )
        size = len(append.data)
        self._track(state, future, number, append.event_count, size, append.request_id)

    def _track(
        self,
        state: WriterState,
        future: asyncio.Future[AppendResult],
        number: int,
        count: int,
        size: int,
        rid: int,
    ) -> None:
        """Charge the append's bytes, queue it behind the writer's earlier ones."""
        self.inflight_bytes += size
        self.budget.charge(size)
        if not self.paused and (
            self.inflight_bytes > self.inflight_limit
            or (self.budget.over and self.inflight_bytes > self.budget.floor)
        ):
            self.paused = True  # the socket pauses when the dispatch loop ends (process)
        state.queue.append((future, number, count, size, rid, self.conn.dispatched_at))
        # One context for every done-callback of this connection (a callback otherwise
        # copies the current one: one more object per append for the collector to trace).
        future.add_done_callback(state.drain, context=self.context)

    def _drain(self, state: WriterState, _: object = None) -> None:
        """Handle the writer's finished appends from the head of its queue, in order: an
        ack per stored append (``DataAppended`` packed straight from the numbers), the
        error reply for a failed one."""
        queue = state.queue
        freed = 0
        m = self.metrics
        now = time.perf_counter()
        while queue and queue[0][0].done():
            queued = queue.popleft()
            future, number, count, size, rid, started = queued
            freed += size
            self.inflight_bytes -= size
            if future.cancelled():
                continue
            exc = future.exception()
            if exc is not None:
                self.failed(state, queued, exc)
                continue
            result = future.result()
            if result.duplicate:
                m.duplicate_appends += 1
            else:
                m.appends += 1
                m.events += count
                m.append_bytes += size
            m.append_latency.observe(now - started)
            if state.session is not _OPEN and state.step(Event.STORED) is Action.DROP:
                continue
            if number > state.last_acked:
                previous, state.last_acked = state.last_acked, number
            elif number <= state.setup:  # resent after AppendSetup: durable already, say so
                previous = max(NULL_ATTRIBUTE_VALUE, number - count)
            else:
                continue
            offset = result.new_length
            self.conn.send_frame(data_appended_frame(state.wid, number, previous, rid, offset))
        if freed:
            self.budget.charge(-freed)
        if self.paused and self.inflight_bytes <= self.inflight_limit // 2:
            if not self.budget.over or self.inflight_bytes <= self.budget.floor:
                self.paused = False
                self.conn.process()
            else:
                self.budget.wait(self, self._drain_budget)

    def _drain_budget(self) -> None:
        if self.paused and not self.conn.closed:
            self.paused = False
            self.conn.process()

    def release(self) -> None:
        """The connection is gone: give its inflight bytes back to the store-wide budget
        (the appends themselves still complete; their acks have nowhere to go)."""
        self.budget.forget(self)
        for state in self.writers.values():
            state.step(Event.LOST)

    def failed(self, state: WriterState, queued: Queued, exc: BaseException) -> None:
        conn = self.conn
        _, number, _, _, rid, _ = queued
        writer, segment = state.writer, state.segment
        if isinstance(exc, BadOffset):
            if state.step(Event.CONDITION_FAILED) is Action.DROP:
                return
            # The writer stays set up; its next append is judged on what is durable, so
            # the number the failed append used may be sent again.
            in_flight = [q[1] for q in state.queue]
            state.last_stored = max([state.last_acked, *in_flight])
            self.metrics.errors["ConditionalCheckFailed"] += 1
            conn.send(encode(ConditionalCheckFailed(writer, number, rid)))
            return
        fenced = isinstance(exc, BadAttributeUpdate)
        if state.step(Event.FENCED if fenced else Event.STORE_FAILED) is Action.DROP:
            return  # only the earliest failure of a session is reported
        if self.writers.get(writer.int) is state:
            del self.writers[writer.int]
            conn.assembler.forget(writer)
        if isinstance(exc, SegmentSealed):
            conn.reply(SegmentIsSealed(rid, segment, "", number))
        elif isinstance(exc, SegmentNotFound):
            conn.reply(NoSuchSegment(rid, segment, "", -1))
        elif fenced:
            conn.reply(InvalidEventNumber(writer, rid, "", number))
            conn.close()
        else:
            # A full disk, an I/O error, the store closing: the writer's session ends with
            # an ErrorMessage (code UNSPECIFIED; the connection stays up for reads). The
            # client reconnects, learns what is durable from AppendSetup and resends.
            if isinstance(exc, StorageError) and exc.retriable:
                log.warning("append to %s failed: %s", segment, exc)
            elif not isinstance(exc, StorageError):
                log.error("append to %s failed", segment, exc_info=exc)
            conn.reply(ErrorMessage(rid, segment, f"append failed: {exc}", UNSPECIFIED))
