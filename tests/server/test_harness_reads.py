"""ReadSegment through the in-memory harness (``harness.py``): the fast path answered from
memory without a task, and the one storage call of every other read (reference 8.1):
parked at the tail and woken, sealed, deleted, timed out, past the end, missing,
truncated, and the size rules. Each test names what it guards (``scripts/mutate.py``
runs these against mutants of ``server/reads.py``)."""

from __future__ import annotations

import uuid
from pathlib import Path

from segmentstore_client.protocol import (
    DeleteSegment,
    ErrorMessage,
    NoSuchSegment,
    ReadSegment,
    SealSegment,
    SegmentDeleted,
    SegmentIsSealed,
    SegmentIsTruncated,
    SegmentRead,
    SegmentSealed,
    SegmentTruncated,
    TruncateSegment,
)

from .harness import Harness, Peer, harness
from .test_harness import KiB, acks, append, create, setup


def replies(peer: Peer, rid: int) -> list[object]:
    return [c for c in peer.received if getattr(c, "request_id", None) == rid]


async def filled(h: Harness, name: str, *sizes: int) -> tuple[Peer, uuid.UUID, int]:
    """A connection whose segment ``name`` holds one event of about each size, acknowledged,
    and the segment's length."""
    peer = h.connect()
    await create(peer, name)
    w = uuid.uuid4()
    await setup(peer, name, w)
    for n, size in enumerate(sizes, 1):
        peer.send_raw(append(w, n, size))
        await peer.until(lambda n=n: len(acks(peer)) == n, "ack")
    return peer, w, h.server.ctx.store.info(name).length


async def answered(peer: Peer, rid: int) -> object:
    await peer.until(lambda: bool(replies(peer, rid)), f"reply to {rid}")
    [reply] = replies(peer, rid)
    return reply


async def test_a_cache_hit_is_answered_without_a_task(tmp_path: Path) -> None:
    """Guards Reads.read_now's fast path: the reply is written before the loop turns."""
    async with harness(tmp_path) as h:
        peer, _, _ = await filled(h, "s", 100)
        peer.read()
        data = h.server.ctx.store.try_read("s", 0, 1000)
        assert data is not None
        peer.send(ReadSegment("s", 0, 1000, "", 70))
        assert not peer.conn._tasks
        peer.conn._flush()
        peer.read()
        assert replies(peer, 70) == [SegmentRead("s", 0, True, False, data.data, 70)]


async def test_a_parked_read_gets_the_next_append(tmp_path: Path) -> None:
    """Guards Reads.read_segment's tail wait: parked (a task, no reply), woken by data."""
    async with harness(tmp_path) as h:
        writer, w, end = await filled(h, "s", 100)
        reader = h.connect()
        reader.send(ReadSegment("s", end, 1000, "", 71))
        await reader.settle(20)
        assert reader.conn._tasks and replies(reader, 71) == []
        writer.send_raw(append(w, 2, 50))
        reply = await answered(reader, 71)
        assert isinstance(reply, SegmentRead) and reply.at_tail and not reply.end_of_segment
        grown = h.server.ctx.store.info("s").length
        assert (reply.offset, len(reply.data)) == (end, grown - end) and grown > end


async def test_sealing_a_parked_read_answers_segment_is_sealed(tmp_path: Path) -> None:
    """Guards the SegmentIsSealed branch of Reads.read_segment (8.1: a seal cancels a
    parked read); a read at the sealed end afterwards is an empty endOfSegment read."""
    async with harness(tmp_path) as h:
        peer, _, end = await filled(h, "s", 100)
        peer.send(ReadSegment("s", end, 1000, "", 72))
        peer.send(ReadSegment("s", end + 50, 1000, "", 73))  # past the end
        await peer.settle(20)
        peer.send(SealSegment(74, "s", ""))
        assert await answered(peer, 74) == SegmentSealed(74, "s")
        assert await answered(peer, 72) == SegmentIsSealed(72, "s", "", end)
        beyond = await answered(peer, 73)
        assert isinstance(beyond, ErrorMessage) and beyond.segment == "s"
        peer.send(ReadSegment("s", end, 1000, "", 75))
        assert await answered(peer, 75) == SegmentRead("s", end, False, True, b"", 75)
        peer.send(ReadSegment("s", end + 1, 1000, "", 76))  # past a sealed end, not parked
        assert isinstance(await answered(peer, 76), ErrorMessage)


async def test_deleting_under_a_parked_read_answers_empty(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        peer, _, end = await filled(h, "s", 100)
        peer.send(ReadSegment("s", end, 1000, "", 77))
        await peer.settle(20)
        peer.send(DeleteSegment(78, "s", ""))
        assert await answered(peer, 78) == SegmentDeleted(78, "s")
        assert await answered(peer, 77) == SegmentRead("s", end, True, False, b"", 77)


async def test_a_parked_read_times_out_empty_at_tail(tmp_path: Path) -> None:
    """Guards the wait= the server passes: its tail timeout, then an empty atTail read."""
    async with harness(tmp_path, tail_read_timeout_s=0.05) as h:
        peer, _, end = await filled(h, "s", 100)
        peer.send(ReadSegment("s", end, 1000, "", 79), ReadSegment("s", end + 9, 1000, "", 80))
        assert await answered(peer, 79) == SegmentRead("s", end, True, False, b"", 79)
        assert await answered(peer, 80) == SegmentRead("s", end + 9, True, False, b"", 80)


async def test_missing_and_truncated_reads(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        peer, _, _ = await filled(h, "s", 100)
        peer.send(ReadSegment("nope", 5, 1000, "", 81))
        assert await answered(peer, 81) == NoSuchSegment(81, "nope", "", 5)
        peer.send(TruncateSegment(82, "s", 40, ""))
        assert await answered(peer, 82) == SegmentTruncated(82, "s")
        peer.send(ReadSegment("s", 10, 1000, "", 83))
        assert await answered(peer, 83) == SegmentIsTruncated(83, "s", 40, "", 10)


async def test_read_sizes_are_clamped(tmp_path: Path) -> None:
    """Guards Reads.size: at least 8 bytes, at most the connection's read cap."""
    async with harness(tmp_path, store_output_bytes=1024 * KiB) as h:
        peer, _, end = await filled(h, "s", 600 * KiB)
        h.server.sweep()  # fits the read cap to the connection's share
        peer.send(ReadSegment("s", 0, 1, "", 84), ReadSegment("s", 0, 0, "", 85))
        for rid in (84, 85):
            reply = await answered(peer, rid)
            assert isinstance(reply, SegmentRead) and len(reply.data) == 8
            assert not reply.at_tail
        cap = peer.conn.read_cap
        assert cap < end
        peer.send(ReadSegment("s", 0, 2**31 - 1, "", 86))
        reply = await answered(peer, 86)
        assert isinstance(reply, SegmentRead) and len(reply.data) == cap


async def test_a_chunk_file_read_is_answered_and_gives_its_reservation_back(
    tmp_path: Path,
) -> None:
    """Guards Reads.disk_slot: the reservation and the disk slot are given back after the
    read (a leak would stall the next reads of the connection and of the store)."""
    store = {"read_cache_bytes": 256 * KiB, "flush_bytes": 128 * KiB}
    async with harness(tmp_path, store=store) as h:
        peer, _, _ = await filled(h, "s", *([64 * KiB] * 12))
        segments = h.server.ctx.store
        await peer.until(lambda: segments.try_read("s", 0, 1024) is None, "evicted", read=False)
        free = h.server.disk_reads._value
        for i in range(6):
            peer.send(ReadSegment("s", i * 64 * KiB, 64 * KiB, "", 90 + i))
            reply = await answered(peer, 90 + i)
            assert isinstance(reply, SegmentRead) and len(reply.data) == 64 * KiB
            assert reply.offset == i * 64 * KiB and not reply.at_tail
        assert peer.conn._reserved == 0
        assert h.server.disk_reads._value == free
