"""ReadSegment for one connection (reference section 8), within the connection's output
budget.

A read is answered from memory without a task when the read cache has the bytes
(``store.try_read``). Any other read (one that needs the chunk files, or waits at or past
the tail of an open segment) is ONE call in a task: ``store.read(..., wait=tail timeout,
disk_guard=...)``, which owns the waiting and the disk. Before it touches the disk, storage
enters ``disk_guard``: the read reserves its size in the connection's output
(``reserve_output``: one read always may go, more only while the queued output has room)
and takes a slot of the store-wide ``disk_reads`` semaphore, so reads served from chunk
files are covered by the same backpressure as replies. A read returns at most ``read_cap``
bytes, which shrinks when many connections share the store-wide output budget (returning
less than asked is legal: the client asks again from the new offset).

Replies of the task (reference 8.1): the result as SegmentRead, except an empty
end-of-segment result, which can only mean the segment was sealed at the read's offset after
``read_now`` looked (it parked, or was about to): SegmentIsSealed, as Java answers a parked
read that a seal cancels.
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
    from .connection import Connection

MAX_READ_BYTES = 2 * 1024 * 1024
# Below this a read's data is joined into its frame; above, it goes out as its own piece.
_ZERO_COPY_READ_BYTES = 16 * 1024


class Reads:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.store = conn.store
        self.metrics = conn.metrics

    def size(self, command: ReadSegment) -> int:
        return min(self.conn.read_cap, max(8, command.suggested_length))

    def read_now(self, command: ReadSegment) -> None:
        """Answer from memory without a task when possible; else park the read in a task."""
        conn = self.conn
        try:
            result = self.store.try_read(command.segment, command.offset, self.size(command))
        except InvalidOffset:
            # Past the end: a future read if the segment can still grow (reference 8.1);
            # storage decides, in the task.
            conn.spawn(command, self.read_segment(command))
            return
        except StorageError as e:
            conn.fail(command, e)
            return
        if result is None or (not result.data and result.at_tail):
            conn.spawn(command, self.read_segment(command))
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
        """A read that needs the disk, or waits at (or past) the tail of an open segment."""
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
        if result.end_of_segment and not result.data:
            conn.reply(SegmentIsSealed(command.request_id, command.segment, "", command.offset))
        else:
            self.send_read(command, result)

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
