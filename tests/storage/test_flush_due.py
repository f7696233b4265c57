"""Issue 19, round 6: a pass of the flush timer writes only the segments that are due.

With 100 segments taking a few events a second each, a flush every second rewrote every
segment's last partial block (O_DIRECT, plus its checksums): ~200 syscalls and disk writes
a second on a worker thread, and the log's commit rate halved while they ran (strace,
``bench_latency.py --active 100``). A timer pass now writes a segment once it has
``segment_flush_bytes`` waiting or at the ``flush_small_every``-th pass it is seen dirty;
anything that kicks a flush (a store-wide bound, a checkpoint, close) still writes all."""

from __future__ import annotations

import asyncio
from pathlib import Path

from segmentstore.storage import SegmentStore
from segmentstore.storage.container import SegmentContainer

from .conftest import small_config


def flushed(c: SegmentContainer, name: str) -> bool:
    seg = c._segments[name]
    return seg.flushed == seg.length


async def test_a_timer_pass_writes_only_what_is_due(tmp_path: Path) -> None:
    # No timer pass of its own in this test: the passes are run by hand.
    cfg = small_config(
        tmp_path / "data",
        flush_interval_s=3600,
        segment_flush_bytes=8 * 1024,
        flush_small_every=3,
    )
    async with await SegmentStore.open(cfg) as s:
        c = s._route("slow")
        for name in ("slow", "busy"):
            await s.create_segment(name)
        await s.append("slow", b"s" * 100)
        await s.append("busy", b"b" * 8 * 1024)
        assert await c._flush(everything=False)
        assert flushed(c, "busy")  # segment_flush_bytes waiting: written at once
        assert not flushed(c, "slow")
        assert await c._flush(everything=False)
        assert not flushed(c, "slow")
        assert await c._flush(everything=False)
        assert flushed(c, "slow")  # the third pass it was seen dirty
        assert (await s.read("slow", 0, 100)).data == b"s" * 100
        # After its write the count starts again.
        await s.append("slow", b"t" * 100)
        assert await c._flush(everything=False)
        assert not flushed(c, "slow")
        assert await c._flush()  # a full flush (bounds, checkpoint) takes everything
        assert flushed(c, "slow")


async def test_a_kicked_flush_writes_every_dirty_segment(tmp_path: Path) -> None:
    cfg = small_config(tmp_path / "data", flush_interval_s=3600, flush_small_every=1000)
    async with await SegmentStore.open(cfg) as s:
        c = s._route("a")
        for name in ("a", "b"):
            await s.create_segment(name)
            await s.append(name, b"x" * 100)
        assert not flushed(c, "a") and not flushed(c, "b")
        c._kick_flush()  # what the store-wide bounds and close do
        for _ in range(200):
            if flushed(c, "a") and flushed(c, "b"):
                break
            await asyncio.sleep(0.01)
        assert flushed(c, "a") and flushed(c, "b")


async def test_a_deleted_segment_leaves_no_pass_count(tmp_path: Path) -> None:
    cfg = small_config(tmp_path / "data", flush_interval_s=3600, flush_small_every=5)
    async with await SegmentStore.open(cfg) as s:
        c = s._route("gone")
        await s.create_segment("gone")
        await s.append("gone", b"g" * 100)
        assert await c._flush(everything=False)
        assert len(c._dirty_passes) == 1
        await s.delete("gone")
        assert c._dirty_passes == {}
        assert await c._flush(everything=False)
