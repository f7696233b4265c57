"""The append path of one connection (reference section 7): append sessions per writer,
appends handed to the store, acknowledgements in order, and append backpressure.

Appends never get a task of their own: the store returns a future per append and a
done-callback acknowledges it, so acknowledgements leave in commit order. Each writer's
appends are handled from the head of its queue only, so acknowledgements and the error
that ends a session leave in submission order even though the store fails a doomed append
(e.g. on a sealed segment) at once, while earlier ones are still on their way to disk.

Backpressure: the bytes of appends not yet durable are charged to the connection (bound
``connection_inflight_bytes``) and to the store-wide inflight budget; over either, the
connection stops reading its socket until the log catches up (resumes at half).
"""

from __future__ import annotations

import asyncio
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
    AppendSetup,
    ConditionalCheckFailed,
    DataAppended,
    ErrorMessage,
    InvalidEventNumber,
    NoSuchSegment,
    OperationUnsupported,
    SegmentIsSealed,
    SetupAppend,
    encode,
)

from ..storage import (
    SEGMENT_TYPE_TABLE,
    AppendResult,
    BadAttributeUpdate,
    BadOffset,
    SegmentNotFound,
    SegmentSealed,
    StorageError,
)
from .errors import UNSPECIFIED

if TYPE_CHECKING:
    from .connection import Connection

log = logging.getLogger("segmentstore.server")


class WriterState:
    """One writer's append session on this connection (reference 7.6)."""

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


class Appends:
    """The append sessions of one connection."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.store = conn.store
        self.metrics = conn.metrics
        self.writers: dict[uuid.UUID, WriterState] = {}
        self.inflight_bytes = 0
        self.inflight_limit = conn.server.config.connection_inflight_bytes
        self.budget = conn.server.inflight_budget
        self.paused = False  # reading paused until enough appends are durable

    def setup(self, command: SetupAppend) -> None:
        conn = self.conn
        writer, segment = command.writer_id, command.segment
        conn.assembler.setup(writer, segment)
        self.writers.pop(writer, None)
        try:
            info = self.store.info(segment)
            last = self.store.get_attribute(segment, writer)
        except StorageError as e:
            conn.fail(command, e)
            return
        if info.segment_type & SEGMENT_TYPE_TABLE:
            # Only the table layer writes a table segment's entry log.
            conn.reply(OperationUnsupported(command.request_id, "appending to a table segment", ""))
            return
        self.writers[writer] = WriterState(segment, last, self._drain)
        conn.send(encode(AppendSetup(command.request_id, segment, writer, last)))

    def append(self, append: Append) -> None:
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
        size = len(append.data)
        self.inflight_bytes += size
        self.budget.charge(size)
        if not self.paused and (
            self.inflight_bytes > self.inflight_limit
            or (self.budget.over and self.inflight_bytes > self.budget.floor)
        ):
            self.paused = True
            self.conn.update_reading()
        state.queue.append((future, append, time.perf_counter()))
        future.add_done_callback(state.drain)

    def _drain(self, state: WriterState, _: object = None) -> None:
        """Handle the writer's finished appends from the head of its queue, in order."""
        queue = state.queue
        while queue and queue[0][0].done():
            future, append, started = queue.popleft()
            self.inflight_bytes -= len(append.data)
            self.budget.charge(-len(append.data))
            if not future.cancelled():
                exc = future.exception()
                if exc is None:
                    self.appended(state, append, future.result(), started)
                else:
                    self.failed(state, append, exc)
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
            state.failed = True

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
            self.conn.send(
                encode(
                    DataAppended(
                        append.writer_id, number, previous, append.request_id, result.new_length
                    )
                )
            )

    def failed(self, state: WriterState, append: Append, exc: BaseException) -> None:
        conn = self.conn
        writer, rid, number = append.writer_id, append.request_id, append.event_number
        if state.failed:
            return  # only the earliest failure of a session is reported
        if isinstance(exc, BadOffset):
            # The writer stays set up; later appends are judged on what is durable.
            self.metrics.errors["ConditionalCheckFailed"] += 1
            conn.send(encode(ConditionalCheckFailed(writer, number, rid)))
            return
        state.failed = True
        if self.writers.get(writer) is state:
            del self.writers[writer]
            conn.assembler.forget(writer)
        if isinstance(exc, SegmentSealed):
            conn.reply(SegmentIsSealed(rid, append.segment, "", number))
        elif isinstance(exc, SegmentNotFound):
            conn.reply(NoSuchSegment(rid, append.segment, "", -1))
        elif isinstance(exc, BadAttributeUpdate):
            conn.reply(InvalidEventNumber(writer, rid, "", number))
            conn.close()
        else:
            # A full disk, an I/O error, the store closing: the writer's session ends with
            # an ErrorMessage (code UNSPECIFIED; the connection stays up for reads). The
            # client reconnects, learns what is durable from AppendSetup and resends.
            if isinstance(exc, StorageError) and exc.retriable:
                log.warning("append to %s failed: %s", append.segment, exc)
            elif not isinstance(exc, StorageError):
                log.error("append to %s failed", append.segment, exc_info=exc)
            conn.reply(ErrorMessage(rid, append.segment, f"append failed: {exc}", UNSPECIFIED))
