"""The event writer's append session: set up, send blocks, take acknowledgements,
reconnect and resend, fail.

Contract: :class:`WriterSession` owns every piece of a writer's state (the public
:class:`EventWriter` in ``writer.py`` adds the API that accepts events). Its state
changes only through the table in ``writer_state.py``. Blocks are sent in order while
the session is OPEN and nothing blocks them (a conditional append in flight); a lost
connection moves everything unacknowledged back to the unsent queue, and after the next
AppendSetup whatever the server already holds is acknowledged locally and the rest is
resent with its original numbers. A failure rejects every unacknowledged event with the
one error.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import deque

from .admin import AdminClient
from .connection import Connection, next_request_id
from .errors import (
    ClientClosed,
    ConnectFailed,
    ConnectionLost,
    SegmentSealed,
    SegmentStoreError,
    ServerError,
    Timeout,
    WriterClosed,
    WrongHost,
)
from .naming import checked_name, writer_uuid
from .pool import Backoff
from .protocol import (
    NULL_ATTRIBUTE_VALUE,
    AppendSetup,
    Command,
    ConditionalCheckFailed,
    DataAppended,
    InvalidEventNumber,
    SetupAppend,
)
from .replies import error_from_reply
from .writer_blocks import MAX_BLOCK, Ack, Block, frame_block, reject, resolve, trim_block
from .writer_state import WriterInput, WriterState, next_state

log = logging.getLogger("segmentstore_client")

_S = WriterState
_I = WriterInput


class WriterSession:
    """State and session machinery of one event writer (see :class:`EventWriter`)."""

    def __init__(
        self,
        client: AdminClient,
        segment: str,
        writer_id: str | uuid.UUID | None = None,
        *,
        first_event_number: int | None = None,
        block_size: int = 1024 * 1024,
        linger: float = 0.002,
        max_buffered_bytes: int = 32 * 1024 * 1024,
    ) -> None:
        if not 64 <= block_size <= MAX_BLOCK:
            raise ValueError(f"block_size must be within 64..{MAX_BLOCK}")
        if max_buffered_bytes < 2 * block_size:
            raise ValueError("max_buffered_bytes must be at least twice block_size")
        if linger < 0:
            raise ValueError("linger must not be negative")
        if first_event_number is not None and first_event_number < 0:
            raise ValueError("first_event_number must not be negative")
        self._client = client
        self.segment = checked_name(segment)
        self.writer_id = writer_uuid(writer_id)
        self._wid = self.writer_id.bytes
        self._first_event_number = first_event_number
        self._block_size = block_size
        self._linger = linger
        self._max_buffered = max_buffered_bytes
        self._rid = next_request_id()
        self._state = _S.NEW
        self._fast = False
        self._error: BaseException | None = None
        self._conn: Connection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._start_task: asyncio.Future[None] | None = None
        self._reconnect_task: asyncio.Task[None] | None = None
        # the open batch: events numbered _base + 1 .. _base + len(_payloads)
        self._payloads: list[bytes] = []
        # their lengths, while every one came through _write_chunk (write() does not
        # record them: a shorter list means "compute them when sealing")
        self._sizes: list[int] = []
        self._batch_bytes = 0
        self._base = 0
        self._batch_fut: asyncio.Future[None] | None = None
        self._batch_ack: Ack | None = None
        self._flush_handle: asyncio.Handle | None = None
        # sealed blocks: sent and unacknowledged, then sealed and not yet sent
        self._inflight: deque[Block] = deque()
        self._unsent: deque[Block] = deque()
        self._held = 0
        self._room = asyncio.Event()
        self._room_wanted = False  # _wait_room waits: the next ack that frees bytes sets _room
        self._acked = NULL_ATTRIBUTE_VALUE
        self._segment_length = -1
        self._fenced = 0
        self._done_ack: Ack | None = None
        self.reconnects = 0
        """How many times the writer re-established its session after a lost connection."""

    @property
    def state(self) -> WriterState:
        """Where the append session is (see ``writer_state.py``).

        Example: ``if writer.state is WriterState.RECONNECTING: ...``
        """
        return self._state

    def _to(self, event: WriterInput) -> None:
        """Move the session's state by the transition table."""
        self._state = next_state(self._state, event)

    def _check(self) -> None:
        if self._error is not None:
            raise self._error
        if self._state is _S.CLOSED:
            raise WriterClosed(f"writer for {self.segment!r} is closed")

    def _update_fast(self) -> None:
        self._fast = (
            self._state in (_S.OPEN, _S.RECONNECTING)
            and self._base + len(self._payloads) >= self._acked
        )

    def _seal(self) -> None:
        """Close the open batch into a block and send it if the session allows."""
        payloads = self._payloads
        count = len(payloads)
        sizes = self._sizes if len(self._sizes) == count else list(map(len, payloads))
        size = self._batch_bytes
        fut = self._batch_fut
        assert fut is not None
        first = self._base + 1
        last = self._base + count
        self._payloads = []
        self._sizes = []
        self._batch_bytes = 0
        self._base = last
        self._batch_fut = None
        self._batch_ack = None
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        if first <= self._acked:  # the server already has some (it told us at setup)
            skip = min(count, self._acked - first + 1)
            payloads = payloads[skip:]
            sizes = sizes[skip:]
            count -= skip
            if not count:
                resolve(fut)
                return
            size = sum(sizes) + 8 * count
        frame = frame_block(self._wid, self._rid, payloads, sizes, size, last)
        block = Block(last, count, frame, size, fut)
        self._held += size
        inflight = self._inflight
        # not self._blocked(), inlined: every lone event passes here
        if (
            self._state is _S.OPEN
            and not self._unsent
            and not (inflight and inflight[-1].conditional)
        ):
            conn = self._conn
            assert conn is not None
            inflight.append(block)
            # An open session means an open connection: its close listener would have
            # moved us to RECONNECTING first.
            if isinstance(frame, bytes):
                conn.write(frame)
            else:  # in parts: immutable bytes, so writelines may hold them uncopied
                conn.writelines(list(frame))
        else:
            self._unsent.append(block)

    def _blocked(self) -> bool:
        """Nothing may be sent behind an unresolved conditional append (a Java server
        would fence the writer if that append failed)."""
        return bool(self._inflight) and self._inflight[-1].conditional

    def _pump(self) -> None:
        """Send unsent blocks in order while the session is open and nothing blocks."""
        if self._state is not _S.OPEN:
            return
        conn = self._conn
        assert conn is not None
        unsent, inflight = self._unsent, self._inflight
        frames: list[bytes] = []
        while unsent and not (inflight and inflight[-1].conditional):
            block = unsent.popleft()
            inflight.append(block)
            frame = block.frame
            if isinstance(frame, bytes):
                frames.append(frame)
            else:
                frames.extend(frame)
        if frames:
            conn.writelines(frames)

    async def _connect(self, backoff: Backoff) -> tuple[Connection, int]:
        """Acquire a connection and run SetupAppend, retrying what a retry can fix."""
        pool = self._client._pool
        renewed = False
        while True:
            remaining = max(0.0, backoff.deadline - asyncio.get_running_loop().time())
            token = self._client.options.delegation_token
            try:
                conn = await pool.acquire(timeout=remaining)
                reply = await conn.call(
                    SetupAppend(self._rid, self.writer_id, self.segment, token), self._rid
                )
            except ConnectFailed:
                raise  # the pool already retried for what was left of the budget
            except (ConnectionLost, Timeout) as e:
                if pool.closed:
                    raise ClientClosed("the client is closed") from e
                await backoff.wait(e)
                continue
            if isinstance(reply, AppendSetup):
                return conn, reply.last_event_number
            if not renewed and await self._client._renew_expired(reply, token):
                renewed = True  # an expired token: once more with a fresh one
                continue
            error = error_from_reply(reply)
            if isinstance(error, WrongHost):
                conn.close("answered WrongHost")
                await backoff.wait(error)
                continue
            raise error

    def _attach(self, conn: Connection) -> None:
        self._conn = conn
        conn.add_writer(self.writer_id, self._on_reply)
        conn.add_route(self._rid, self._on_reply)
        conn.on_close(self._on_connection_lost)

    def _detach(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.remove_writer(self.writer_id, self._on_reply)
            conn.remove_route(self._rid)
            conn.remove_close_listener(self._on_connection_lost)

    def _on_reply(self, cmd: Command) -> None:
        t = type(cmd)
        if t is DataAppended:
            self._on_acked(cmd)  # type: ignore[arg-type]
        elif t is ConditionalCheckFailed:
            self._on_conditional_failed(cmd)  # type: ignore[arg-type]
        elif t is InvalidEventNumber:
            self._fenced += 1
            if self._fenced >= 3:
                self._fail(error_from_reply(cmd))
            elif self._conn is not None:
                self._conn.close("fenced the writer (InvalidEventNumber)")
        elif t is AppendSetup:
            pass  # a late duplicate; the session is already set up
        else:
            error = error_from_reply(cmd)
            if isinstance(error, WrongHost) and self._conn is not None:
                self._conn.close("answered WrongHost")
                return
            if isinstance(error, SegmentSealed):
                first = self._first_unacked()
                error.event_number = first
                error.args = (f"{error.args[0]}; events from number {first} on were refused",)
            self._fail(error)

    def _first_unacked(self) -> int:
        for q in (self._inflight, self._unsent):
            if q:
                return q[0].last - q[0].count + 1
        return self._base + 1

    def _on_acked(self, cmd: DataAppended) -> None:
        n = cmd.event_number
        inflight = self._inflight
        freed = 0
        while inflight and inflight[0].last <= n:
            block = inflight.popleft()
            freed += block.size
            fut = block.fut
            if not fut.done():
                fut.set_result(None)
        self._fenced = 0
        if n > self._acked:
            self._acked = n
        if cmd.current_segment_write_offset >= 0:
            self._segment_length = cmd.current_segment_write_offset
        if freed:
            self._held -= freed
            if self._room_wanted:  # a write waits for room (no Event.is_set call per ack)
                self._room_wanted = False
                self._room.set()
        if self._unsent:
            self._pump()
        elif not inflight and self._payloads and self._state is _S.OPEN:
            # Nothing in flight: waiting out the linger would only add latency.
            self._seal()

    def _on_conditional_failed(self, cmd: ConditionalCheckFailed) -> None:
        inflight = self._inflight
        for block in inflight:
            if block.conditional and block.last == cmd.event_number:
                inflight.remove(block)
                self._held -= block.size
                self._room.set()
                err = error_from_reply(cmd)
                if isinstance(err, ServerError):
                    err.segment = self.segment
                reject(block.fut, err)
                break
        self._pump()

    def _on_connection_lost(self, error: ConnectionLost) -> None:
        if self._state is not _S.OPEN:
            return
        log.info("%r: %s; reconnecting", self, error)
        self._detach()
        self._to(_I.CONNECTION_LOST)
        # Everything unacknowledged is resent after the next AppendSetup, in order.
        self._unsent.extendleft(reversed(self._inflight))
        self._inflight.clear()
        assert self._loop is not None
        self._reconnect_task = self._loop.create_task(self._reconnect(error))

    async def _reconnect(self, cause: ConnectionLost) -> None:
        try:
            conn, last = await self._connect(Backoff(self._client.options))
        except BaseException as e:
            if self._state is _S.RECONNECTING:
                self._fail(e if isinstance(e, SegmentStoreError) else cause)
            if not isinstance(e, Exception):
                raise
            return
        if self._state is not _S.RECONNECTING:
            return
        self._attach(conn)
        self.reconnects += 1
        self._after_setup(last)

    def _after_setup(self, last: int) -> None:
        """The server has every event numbered <= ``last``: ack those, resend the rest."""
        if last != NULL_ATTRIBUTE_VALUE and last > self._acked:
            self._acked = last
        unsent = self._unsent
        freed = 0
        while unsent and unsent[0].last <= self._acked:
            block = unsent.popleft()
            freed += block.size
            resolve(block.fut)
        if unsent and unsent[0].last - unsent[0].count + 1 <= self._acked:
            freed += self._trim(unsent[0])
        if freed:
            self._held -= freed
            self._room.set()
        if self._base < self._acked and self._payloads:
            # The server has part of the open batch too (only if someone else wrote with
            # this writer id); sealing trims it.
            self._seal()
        if self._base < self._acked:
            self._base = self._acked
        self._to(_I.SET_UP)
        self._update_fast()
        self._pump()
        if not self._inflight and not self._unsent and self._payloads:
            self._seal()

    def _trim(self, block: Block) -> int:
        """Drop the events of ``block`` that the server already has; return freed bytes."""
        return trim_block(
            block, self._acked - (block.last - block.count + 1) + 1, self._wid, self._rid
        )

    def _fail(self, error: BaseException, *, deliberate: bool = False) -> None:
        """The writer cannot continue: fail every unacknowledged event with ``error``.

        ``deliberate`` (an :meth:`abort`) logs at DEBUG; an unexpected failure at WARNING.
        """
        if self._state in (_S.FAILED, _S.CLOSED):
            return
        self._to(_I.FAIL)
        self._fast = False
        self._error = error
        if deliberate:
            log.debug("%r aborted: %s", self, error)
        else:
            log.warning("%r failed: %s", self, error)
        for q in (self._inflight, self._unsent):
            for block in q:
                reject(block.fut, error)
            q.clear()
        self._held = 0
        if self._batch_fut is not None:
            reject(self._batch_fut, error)
        self._payloads = []
        self._sizes = []
        self._batch_bytes = 0
        self._batch_fut = None
        self._batch_ack = None
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        self._room.set()
        self._detach()
        self._client._forget_writer(self)

    def _shutdown(self, error: BaseException) -> None:
        for q in (self._inflight, self._unsent):
            for block in q:
                reject(block.fut, error)
            q.clear()
        if self._batch_fut is not None:
            reject(self._batch_fut, error)
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        if self._reconnect_task is not None and not self._reconnect_task.done():
            self._reconnect_task.cancel()
        self._fast = False
        self._room.set()
        self._detach()
        self._client._forget_writer(self)
