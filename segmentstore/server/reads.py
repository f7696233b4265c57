"""ReadSegment for one connection (reference section 8), within the connection's output
budget.

A read is answered from memory without a task when the read cache has the bytes. A read
that needs the chunk files, or waits at the tail of an open segment, gets a task; before
it touches the disk it reserves its size in the connection's output (``reserve_output``:
one read always may go, more only while the queued output has room) and takes a slot of
the store-wide ``disk_reads`` semaphore, so reads served from chunk files are covered by
the same backpressure as replies. A read returns at most ``read_cap`` bytes, which shrinks
when many connections share the store-wide output budget (returning less than asked is
legal: the client asks again from the new offset).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from segmentstore_client.protocol import (
    ReadSegment,
    SegmentIsSealed,
    SegmentRead,
    encode,
    segment_read_parts,
)

from ..storage import InvalidOffset, ReadResult, SegmentNotFound, StorageError

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
        except InvalidOffset as e:
            # Past the end: a future read if the segment can still grow (reference 8.1).
            try:
                sealed = self.store.info(command.segment).sealed
            except StorageError as gone:
                conn.fail(command, gone)
                return
            if sealed:
                conn.fail(command, e)
            else:
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
        segment, offset, rid = command.segment, command.offset, command.request_id
        store = self.store
        try:
            info = store.info(segment)
            if offset >= info.length and not info.sealed:
                await store.wait_for_data(segment, offset, conn.ctx.tail_read_timeout)
                try:
                    info = store.info(segment)
                except SegmentNotFound:
                    # Deleted while the read was parked: an empty tail read, as Java does.
                    conn.reply(SegmentRead(segment, offset, True, False, b"", rid))
                    return
                if offset >= info.length:
                    if info.sealed and offset == info.length:
                        conn.reply(SegmentIsSealed(rid, segment, "", offset))
                    elif info.sealed:
                        conn.fail(
                            command, InvalidOffset(segment, f"read at {offset} beyond the end")
                        )
                    else:  # nothing arrived in time: an empty read at the tail
                        conn.reply(SegmentRead(segment, offset, True, False, b"", rid))
                    return
            size = self.size(command)
            await conn.reserve_output(size)
            try:
                async with conn.server.disk_reads:
                    result = await store.read(segment, offset, size)
            finally:
                conn.release_output(size)
        except StorageError as e:
            conn.fail(command, e)
            return
        self.send_read(command, result)
