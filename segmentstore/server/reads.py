"""ReadSegment for one connection (reference section 8), within the connection's output
budget.

A read is answered from memory without a task when the read cache has the bytes
(``store.try_read``). A read at or past the tail of an open segment is parked without a
task either (``ParkedRead``, issue 19): ``store.park`` puts a waiter on the segment whose
``wake`` hands the read to the server's ``EarlyFlush``, which answers it (``answer``: the
store's ``parked_result``) right after the waking commit's acks were written, and writes
the replies at once. A parked read counts as a request being served
(``max_pending_requests``); the server's sweep times it out (``expire``, on the
connection's clock: the tail timeout, late by at most one sweep interval) and the
connection closing takes it off its segment (``release``). Any other read (one that
needs the chunk files, or a tail read the store will not park: closing) is ONE call in a
task: ``store.read(..., wait=tail timeout, disk_guard=...)``, which owns the waiting and
the disk. Before it touches the disk, storage enters ``disk_guard``: the read reserves its
size in the connection's output (``reserve_output``: one read always may go, more only
while the queued output has room) and takes a slot of the store-wide ``disk_reads``
semaphore, so reads served from chunk files are covered by the same backpressure as
replies. A read returns at most ``read_cap`` bytes, which shrinks when many connections
share the store-wide output budget (returning less than asked is legal: the client asks
again from the new offset).

Replies of a parked read or a task (reference 8.1): the result as SegmentRead, except an
empty end-of-segment result, which can only mean the segment was sealed at the read's
offset after ``read_now`` looked (it parked, or was about to): SegmentIsSealed, as Java
answers a parked read that a seal cancels.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from segmentstore_client.protocol import (
    ReadSegment,
    SegmentIsSealed,
    SegmentRead,
    encode,
    segment_read_parts,
)

from ..storage import InvalidOffset, ReadResult, StorageError

if TYPE_CHECKING:
    from ..storage.metadata import Waiter
    from .connection import Connection

MAX_READ_BYTES = 2 * 1024 * 1024
# Below this a read's data is joined into its frame; above, it goes out as its own piece.
_ZERO_COPY_READ_BYTES = 16 * 1024


class ParkedRead:
    """A ReadSegment parked at the tail: no task, no timer (``Reads.park``)."""

    __slots__ = ("command", "deadline", "reads", "waiter")

    def __init__(self, reads: Reads, command: ReadSegment, deadline: float) -> None:
        self.reads = reads
        self.command = command
        self.deadline = deadline  # on the connection's clock
        self.waiter: Waiter | None = None

    def wake(self) -> None:
        """Called by the store inside the commit: answered behind the commit's acks."""
        self.reads.early.woken(self)

    def answer(self) -> None:
        self.reads.answer(self)


class Reads:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.store = conn.store
        self.metrics = conn.metrics
        self.early = conn.server.early_flush
        # Reads parked at the tail, not yet answered (each counts as a pending request).
        self.parked: set[ParkedRead] = set()

    def size(self, command: ReadSegment) -> int:
        return min(self.conn.read_cap, max(8, command.suggested_length))

    def read_now(self, command: ReadSegment) -> None:
        """Answer from memory without a task when possible; park a read at the tail; else
        a task."""
        conn = self.conn
        try:
            result = self.store.try_read(command.segment, command.offset, self.size(command))
        except InvalidOffset:
            # Past the end: a future read if the segment can still grow (reference 8.1).
            self.park(command)
            return
        except StorageError as e:
            conn.fail(command, e)
            return
        if result is None:
            conn.spawn(command, self.read_segment(command))
        elif not result.data and result.at_tail:
            self.park(command)
        else:
            self.send_read(command, result)

    def park(self, command: ReadSegment) -> None:
        """Wait for data at the tail without a task; the store decides if there is anything
        to wait for (past a sealed end: no, the task's read answers InvalidOffset)."""
        conn = self.conn
        parked = ParkedRead(self, command, conn.server.clock() + conn.ctx.tail_read_timeout)
        waiter = self.store.park(command.segment, command.offset, parked.wake)
        if waiter is None:
            conn.spawn(command, self.read_segment(command))
            return
        parked.waiter = waiter
        self.parked.add(parked)

    def answer(self, parked: ParkedRead) -> None:
        """Reply to a parked read that was woken or timed out (once: a read answered or
        released is no longer in ``parked``)."""
        try:
            self.parked.remove(parked)
        except KeyError:
            return
        conn = self.conn
        command = parked.command
        assert parked.waiter is not None
        try:
            result = self.store.parked_result(parked.waiter, self.size(command))
        except StorageError as e:
            conn.fail(command, e)
        else:
            if result is None:  # the bytes are in chunk files only: a task and the disk
                conn.spawn(command, self.read_segment(command))
            else:
                self.reply(command, result)
        # No process() here: the reply's flush runs the backlog (Connection._flush).

    def expire(self, now: float) -> None:
        """The sweep: answer the parked reads whose tail timeout has passed."""
        for parked in [p for p in self.parked if p.deadline <= now]:
            assert parked.waiter is not None
            self.store.unpark(parked.waiter)
            self.answer(parked)

    def release(self) -> None:
        """The connection is gone: take its parked reads off their segments."""
        for parked in self.parked:
            assert parked.waiter is not None
            self.store.unpark(parked.waiter)
        self.parked.clear()

    def reply(self, command: ReadSegment, result: ReadResult) -> None:
        """The reply to a read that may have waited (module docstring)."""
        if result.end_of_segment and not result.data:
            rid, segment = command.request_id, command.segment
            self.conn.reply(SegmentIsSealed(rid, segment, "", command.offset))
        else:
            self.send_read(command, result)

    def send_read(self, command: ReadSegment, result: ReadResult) -> None:
        data = result.data
        self.metrics.reads += 1
        self.metrics.read_bytes += len(data)
        args = (command.segment, command.offset, result.at_tail, result.end_of_segment, data)
        if len(data) >= _ZERO_COPY_READ_BYTES:
            self.conn.send(*segment_read_parts(*args, command.request_id))
        else:
            self.conn.send(encode(SegmentRead(*args, command.request_id)))

    async def read_segment(self, command: ReadSegment) -> None:
        """A read that needs the disk, or waits at (or past) the tail where the store would
        not park it."""
        conn = self.conn
        try:
            result = await self.store.read(
                command.segment,
                command.offset,
                self.size(command),
                wait=conn.ctx.tail_read_timeout,
                disk_guard=self.disk_slot,
            )
        except StorageError as e:
            conn.fail(command, e)
            return
        self.reply(command, result)

    @contextlib.asynccontextmanager
    async def disk_slot(self, size: int) -> AsyncIterator[None]:
        """Around a chunk-file read of up to ``size`` bytes: room in this connection's
        output, then one of the store-wide disk-read slots."""
        conn = self.conn
        await conn.reserve_output(size)
        try:
            async with conn.server.disk_reads:
                yield
        finally:
            conn.release_output(size)
