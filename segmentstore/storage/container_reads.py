# Reads of one container: from the read cache, from chunk files, or parked at the tail.
#
# Contract (api.py states the caller-facing rules).
# * ``try_read`` answers from memory only and never suspends: a ReadResult, or None when the
#   bytes are only in chunk files. It raises SegmentNotFound / SegmentTruncated /
#   SegmentDamaged directly, and InvalidOffset for an offset past the committed length.
# * ``read`` owns one whole read. A cache hit returns without suspending and without calling
#   the guard. With ``wait`` set (a tail read), a read at or past the committed end of an
#   open segment parks until the segment grows past ``offset``, is sealed, deleted or merged
#   away, the container closes, or ``wait`` seconds pass. A read that needs chunk files
#   enters ``disk_guard(n)`` exactly once (n = the most bytes the result can carry), looks at
#   the segment again inside it (a truncate or delete that ran while the guard waited wins)
#   and reads the files in a worker thread.
# * What a parked read returns: the new data (``at_tail`` when it ends at the committed end);
#   an empty ``at_tail`` result on timeout, delete or close; an empty ``end_of_segment``
#   result when the segment was sealed exactly at ``offset``; InvalidOffset when it was
#   sealed below ``offset``.
# * Committed state is only ever read here, never changed (the read cache's LRU order
#   aside), so reads need no lock against the commit loop.
from __future__ import annotations

import asyncio
import logging

from .api import (
    DiskGuard,
    InvalidOffset,
    ReadResult,
    SegmentDamaged,
    SegmentTruncated,
    StorageUnavailable,
)
from .chunk_sums import ChunkDamaged
from .commit import CommitLoop
from .container_state import _MAX_DISK_READ, _set_result
from .metadata import SegmentMeta

log = logging.getLogger("segmentstore.storage")

_EMPTY = b""


class ContainerReads(CommitLoop):
    def try_read(self, name: str, offset: int, max_length: int) -> ReadResult | None:
        """The read served from memory, or None when it needs a chunk file."""
        seg = self._committed(name)
        if seg.damaged is not None:
            raise SegmentDamaged(name, seg.damaged)
        if offset < seg.start_offset:
            raise SegmentTruncated(name, seg.start_offset, offset)
        length = seg.length
        if offset > length:
            raise InvalidOffset(name, f"read at {offset} beyond length {length}")
        end = min(length, offset + max(0, max_length))
        if end == offset:
            at_end = offset == length
            return ReadResult(offset, _EMPTY, at_end and not seg.sealed, at_end and seg.sealed)
        cache = seg.cache
        if cache is None or offset < cache.start:
            return None
        self._cache.touch(seg)
        at_end = end == length
        return ReadResult(
            offset, cache.read(offset, end), at_end and not seg.sealed, at_end and seg.sealed
        )

    async def read(
        self,
        name: str,
        offset: int,
        max_length: int,
        wait: float | None = None,
        disk_guard: DiskGuard | None = None,
    ) -> ReadResult:
        if wait is not None:
            seg = self._committed(name)
            if offset >= seg.length and not seg.sealed:
                if seg.damaged is not None:
                    raise SegmentDamaged(name, seg.damaged)
                await self._wait(seg, offset, wait)
                if seg.deleted:
                    return ReadResult(offset, _EMPTY, True, False)  # deleted (or merged away)
                if offset >= seg.length and not seg.sealed:
                    return ReadResult(offset, _EMPTY, True, False)  # timed out, or closing
        hit = self.try_read(name, offset, max_length)
        if hit is not None:
            return hit
        if disk_guard is None:
            return await self._read_chunks(name, offset, max_length)
        seg = self._committed(name)
        async with disk_guard(min(seg.length, offset + max_length) - offset):
            # The guard may have waited: look again (truncated, deleted, now in memory).
            hit = self.try_read(name, offset, max_length)
            if hit is not None:
                return hit
            return await self._read_chunks(name, offset, max_length)

    async def _read_chunks(self, name: str, offset: int, max_length: int) -> ReadResult:
        """Read from chunk files what lies below the cache (try_read just returned None)."""
        seg = self._committed(name)
        cache = seg.cache
        end = min(seg.length, offset + max_length)
        # Everything below the cache's start is in chunk files (read_cache.py's invariant).
        disk_end = min(end, cache.start if cache is not None else seg.length)
        disk_end = min(disk_end, offset + _MAX_DISK_READ)
        try:
            data: bytes = await self._loop.run_in_executor(
                self._io_exec, self._chunks.read, seg.id, offset, disk_end
            )
        except ChunkDamaged as exc:
            # A truncate or delete that ran meanwhile removes files legitimately.
            seg2 = self._committed(name)
            if offset < seg2.start_offset:
                raise SegmentTruncated(name, seg2.start_offset, offset) from None
            seg.damaged = f"{exc} (in {exc.path.parent})"
            log.error("%s: segment %r is damaged: %s; its reads fail", self.label, name, exc)
            raise SegmentDamaged(name, seg.damaged) from None
        except OSError as exc:
            log.error(
                "%s: reading %s at %d from chunk files failed: %s", self.label, name, offset, exc
            )
            raise StorageUnavailable(name, f"reading chunk files failed: {exc}") from exc
        stop = offset + len(data)
        cache = seg.cache
        if stop == disk_end < end and cache is not None and cache.start <= stop:
            data = data + cache.read(stop, end)
            stop = end
        at_end = stop == seg.length
        return ReadResult(offset, data, at_end and not seg.sealed, at_end and seg.sealed)

    async def wait_for_data(self, name: str, offset: int, timeout: float) -> None:
        await self._wait(self._committed(name), offset, timeout)

    async def _wait(self, seg: SegmentMeta, offset: int, timeout: float) -> None:
        """Until ``seg`` grows past ``offset``, is sealed or deleted, the container closes,
        or ``timeout`` seconds pass (whichever is first; the caller looks which)."""
        if seg.length > offset or seg.sealed or timeout <= 0 or self._closing:
            return
        fut: asyncio.Future[None] = self._loop.create_future()
        entry = (offset, fut)
        if seg.waiters is None:
            seg.waiters = [entry]
        else:
            seg.waiters.append(entry)
        handle = self._loop.call_later(timeout, _set_result, fut)
        try:
            await fut
        finally:
            handle.cancel()
            waiters = seg.waiters
            if waiters is not None and entry in waiters:
                waiters.remove(entry)
                if not waiters:
                    seg.waiters = None
