# The read cache of one container: committed segment data held in memory.
#
# Contract. A segment's cache covers one contiguous range ``[start, end)`` that always ends at
# the segment's committed length. Data is added only when its log record is durable, and
# evicted only from the front and only once written to the segment's chunk files
# (``seg.flushed``), so every committed byte is at all times in the cache, in a chunk file,
# or both: ``start <= flushed``. ``ReadCache`` keeps the total under its budget by evicting
# the oldest flushed bytes of the least recently used segments, down to 3/4 of the budget
# (so readers a little behind a busy tail still find theirs); unflushed data cannot be
# evicted, so the container flushes when the cache is over budget. A segment whose cache
# empties drops it (``seg.cache = None``): idle segments hold no buffers.
#
# Small appends are copied into a growing ``bytearray`` tail (one small copy beats one object
# per append); big ones are kept as the caller's bytes objects (no copy at all).
from __future__ import annotations

from bisect import bisect_right
from collections import OrderedDict

from .metadata import SegmentMeta

OWN_BLOCK = 32 * 1024  # appends at least this big become blocks of their own
FREEZE = 64 * 1024  # a tail this big becomes an immutable block


class SegmentCache:
    __slots__ = ("blocks", "end", "start", "starts", "tail", "tail_start")

    def __init__(self, start: int) -> None:
        self.start = start
        self.end = start
        self.blocks: list[bytes] = []
        self.starts: list[int] = []
        self.tail = bytearray()
        self.tail_start = start

    @property
    def size(self) -> int:
        return self.end - self.start

    def freeze_tail(self) -> None:
        if self.tail:
            self.blocks.append(bytes(self.tail))
            self.starts.append(self.tail_start)
            self.tail = bytearray()
        self.tail_start = self.end

    def add(self, data: bytes) -> None:
        n = len(data)
        if n >= OWN_BLOCK:
            self.freeze_tail()
            self.blocks.append(data)
            self.starts.append(self.end)
            self.end += n
            self.tail_start = self.end
        else:
            self.tail += data
            self.end += n
            if len(self.tail) >= FREEZE:
                self.freeze_tail()

    def read(self, offset: int, end: int) -> bytes | memoryview:
        """Bytes ``[offset, end)``; requires ``start <= offset <= end <= self.end``."""
        if offset >= self.tail_start:
            base = self.tail_start
            return bytes(self.tail[offset - base : end - base])
        i = bisect_right(self.starts, offset) - 1
        block = self.blocks[i]
        bstart = self.starts[i]
        if end <= bstart + len(block):
            return memoryview(block)[offset - bstart : end - bstart]
        parts: list[bytes | bytearray | memoryview] = []
        pos = offset
        while pos < end:
            if pos >= self.tail_start:
                base = self.tail_start
                parts.append(self.tail[pos - base : end - base])
                break
            block = self.blocks[i]
            bstart = self.starts[i]
            stop = min(end, bstart + len(block))
            parts.append(memoryview(block)[pos - bstart : stop - bstart])
            pos = stop
            i += 1
        return b"".join(parts)

    def pieces(self, offset: int, end: int) -> list[bytes | memoryview]:
        """``[offset, end)`` as views of the immutable blocks (no copy) plus a copy of the tail
        part (the tail keeps growing, so another thread must not hold a view of it)."""
        out: list[bytes | memoryview] = []
        if offset < self.tail_start:
            i = bisect_right(self.starts, offset) - 1
            pos = offset
            while pos < end and i < len(self.blocks):
                block = self.blocks[i]
                bstart = self.starts[i]
                stop = min(end, bstart + len(block))
                out.append(memoryview(block)[pos - bstart : stop - bstart])
                pos = stop
                i += 1
            offset = pos
        if offset < end:
            base = self.tail_start
            out.append(bytes(self.tail[offset - base : end - base]))
        return out

    def evict_front(self, want: int, limit: int) -> int:
        """Drop the oldest cached bytes below ``limit``, whole blocks first, until at least
        ``want`` bytes are gone (or nothing below ``limit`` is left); returns bytes freed."""
        blocks = self.blocks
        starts = self.starts
        freed = 0
        drop = 0
        while drop < len(blocks) and freed < want and starts[drop] + len(blocks[drop]) <= limit:
            freed += len(blocks[drop])
            drop += 1
        if drop == len(blocks) and freed < want:
            # Every block goes (the last one ends where the tail starts, at or below
            # ``limit``), and some of the tail too.
            return self.evict_below(min(limit, self.tail_start + want - freed))
        if drop:
            del blocks[:drop]
            del starts[:drop]
            self.start = starts[0] if blocks else self.tail_start
        return freed

    def evict_below(self, limit: int) -> int:
        """Drop cached bytes below ``limit``: whole blocks, and the front of the tail (which
        holds the newest data, so it is usually only partly flushed); returns bytes freed."""
        freed = 0
        blocks = self.blocks
        starts = self.starts
        drop = 0
        while drop < len(blocks) and starts[drop] + len(blocks[drop]) <= limit:
            freed += len(blocks[drop])
            drop += 1
        if drop:
            del blocks[:drop]
            del starts[:drop]
        if not blocks and limit > self.tail_start:
            cut = min(limit, self.end) - self.tail_start
            del self.tail[:cut]
            self.tail_start += cut
            freed += cut
        self.start = starts[0] if blocks else self.tail_start
        return freed


class ReadCache:
    """Per-container budget and LRU order over the segments' caches."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.size = 0
        self._lru: OrderedDict[int, SegmentMeta] = OrderedDict()

    def add(self, seg: SegmentMeta, data: bytes, offset: int) -> None:
        # Appends do not move a segment in the LRU order (that costs on every append, and a
        # segment being written keeps its unflushed tail anyway); creation and reads do.
        cache = seg.cache
        if cache is None:
            cache = seg.cache = SegmentCache(offset)
            self._lru[seg.id] = seg
        cache.add(data)
        self.size += len(data)

    def touch(self, seg: SegmentMeta) -> None:
        if seg.cache is not None:
            self._lru.move_to_end(seg.id)

    def drop(self, seg: SegmentMeta) -> None:
        cache = seg.cache
        if cache is not None:
            self.size -= cache.size
            seg.cache = None
            self._lru.pop(seg.id, None)

    def over_budget(self) -> bool:
        return self.size > self.budget

    def evict(self) -> None:
        """Once over budget, evict flushed data, oldest bytes of the least recently used
        segments first, down to 3/4 of the budget: the rest stays for readers a little
        behind the tail, and the next appends do not evict again at once."""
        if self.size <= self.budget:
            return
        target = self.budget - self.budget // 4
        for seg in list(self._lru.values()):
            cache = seg.cache
            assert cache is not None
            self.size -= cache.evict_front(self.size - target, seg.flushed)
            if cache.size == 0:
                seg.cache = None
                del self._lru[seg.id]
            if self.size <= target:
                return
