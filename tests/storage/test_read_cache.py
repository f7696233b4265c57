"""The read cache on its own: blocks, the growing tail, reads across them, eviction."""

from __future__ import annotations

from segmentstore.storage.metadata import SegmentMeta
from segmentstore.storage.read_cache import FREEZE, OWN_BLOCK, ReadCache, SegmentCache


def _filled(pieces: list[bytes]) -> tuple[SegmentCache, bytes]:
    cache = SegmentCache(1000)
    for p in pieces:
        cache.add(p)
    return cache, b"".join(pieces)


def test_reads_and_pieces_across_blocks_and_tail() -> None:
    pieces = [b"a" * 10, b"B" * OWN_BLOCK, b"c" * 7, b"D" * (OWN_BLOCK + 5), b"e" * 3]
    cache, whole = _filled(pieces)
    assert (cache.start, cache.end, cache.size) == (1000, 1000 + len(whole), len(whole))
    for a in (1000, 1005, 1010, 1000 + OWN_BLOCK + 12, cache.end - 2):
        for b in (a, a + 1, a + OWN_BLOCK, cache.end):
            b = min(b, cache.end)
            assert bytes(cache.read(a, b)) == whole[a - 1000 : b - 1000]
            assert b"".join(bytes(p) for p in cache.pieces(a, b)) == whole[a - 1000 : b - 1000]


def test_tail_freezes_into_blocks() -> None:
    cache, whole = _filled([bytes([i % 256]) * 1000 for i in range(FREEZE // 1000 * 3)])
    assert len(cache.blocks) >= 2 and len(cache.tail) < FREEZE
    assert bytes(cache.read(1000, cache.end)) == whole


def test_evict_below_drops_blocks_and_the_front_of_the_tail() -> None:
    cache, whole = _filled([b"x" * OWN_BLOCK, b"y" * 100, b"z" * 100])
    freed = cache.evict_below(1000 + OWN_BLOCK + 50)  # the block and half the tail
    assert freed == OWN_BLOCK + 50
    assert cache.start == 1000 + OWN_BLOCK + 50
    assert bytes(cache.read(cache.start, cache.end)) == whole[OWN_BLOCK + 50 :]
    assert cache.evict_below(cache.end) == 150 and cache.size == 0


def test_read_cache_evicts_only_flushed_data_and_drops_empty_caches() -> None:
    rc = ReadCache(budget=1000)
    segs = []
    for i in range(3):
        seg = SegmentMeta(f"s{i}", i + 1, 0, 0)
        rc.add(seg, b"q" * 800, 0)
        seg.length = 800
        segs.append(seg)
    assert rc.size == 2400 and rc.over_budget()
    rc.evict()  # nothing flushed: nothing can go
    assert rc.size == 2400
    segs[0].flushed = 800
    segs[1].flushed = 300
    rc.evict()
    assert segs[0].cache is None  # wholly flushed and evicted
    assert segs[1].cache is not None and segs[1].cache.start == 300
    assert rc.size == 2400 - 800 - 300


def test_evict_front_takes_the_oldest_bytes_and_stops_at_what_is_wanted() -> None:
    cache, whole = _filled([b"a" * OWN_BLOCK, b"b" * OWN_BLOCK, b"c" * OWN_BLOCK, b"d" * 100])
    end = cache.end
    assert cache.evict_front(10, end) == OWN_BLOCK  # a whole block, not less
    assert cache.start == 1000 + OWN_BLOCK
    assert cache.evict_front(OWN_BLOCK + 1, 1000 + 2 * OWN_BLOCK) == OWN_BLOCK  # limit stops it
    assert cache.start == 1000 + 2 * OWN_BLOCK
    assert cache.evict_front(OWN_BLOCK + 40, end) == OWN_BLOCK + 40  # into the tail
    assert (cache.start, cache.size) == (end - 60, 60)
    assert bytes(cache.read(cache.start, end)) == whole[-60:]


def test_read_cache_evicts_to_three_quarters_keeping_the_newest_data() -> None:
    rc = ReadCache(budget=4 * OWN_BLOCK)
    seg = SegmentMeta("s", 1, 0, 0)
    data = b"".join(bytes([i]) * OWN_BLOCK for i in range(6))
    for i in range(6):
        rc.add(seg, data[i * OWN_BLOCK : (i + 1) * OWN_BLOCK], i * OWN_BLOCK)
    seg.length = seg.flushed = len(data)
    rc.evict()
    assert rc.size == 3 * OWN_BLOCK  # down to 3/4 of the budget, not to nothing
    cache = seg.cache
    assert cache is not None and cache.start == 3 * OWN_BLOCK
    assert bytes(cache.read(cache.start, cache.end)) == data[3 * OWN_BLOCK :]
