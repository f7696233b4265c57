"""Tail reads parked at the tail (reference 8.1), through the in-memory harness: a merge,
a connection closing with reads parked, hundreds of readers on one segment, the pending
request count and the read cap. Each read gets exactly one answer and nothing is left on
the segment's waiter list. Each test names what it guards."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from segmentstore_client.protocol import (
    KeepAlive,
    MergeSegments,
    ReadSegment,
    SegmentIsSealed,
    SegmentRead,
    SegmentsMerged,
)

from .harness import Harness, Peer, harness
from .test_harness import KiB, acks, append
from .test_harness_reads import answered, filled, replies


def waiting(h: Harness, name: str) -> list[Any]:
    """The waiters parked on segment ``name`` (an empty list when none)."""
    return h.server.ctx.store._route(name)._segments[name].waiters or []


async def parked(peer: Peer, *reads: ReadSegment) -> None:
    """Send ``reads`` and check none is answered after the loop turned."""
    peer.send(*reads)
    await peer.settle(20)
    rids = {r.request_id for r in reads}
    peer.read()
    assert not [c for c in peer.received if getattr(c, "request_id", None) in rids]


async def test_a_merge_wakes_the_targets_reads_and_seals_the_sources(tmp_path: Path) -> None:
    """Guards the wake of a merge: the target grows; the source is sealed first, in its own
    record, so a read parked at its end is answered SegmentIsSealed."""
    async with harness(tmp_path) as h:
        peer, _, end = await filled(h, "t", 100)
        source = "t#transaction.00000000000000000000000000000001"
        _, _, src_end = await filled(h, source, 50)
        reader = h.connect()
        await parked(
            reader, ReadSegment("t", end, 1000, "", 1), ReadSegment(source, src_end, 1000, "", 2)
        )
        peer.send(MergeSegments(3, "t", source))
        assert isinstance(await answered(peer, 3), SegmentsMerged)
        reply = await answered(reader, 1)
        assert isinstance(reply, SegmentRead) and reply.offset == end and reply.at_tail
        assert len(reply.data) == src_end
        assert await answered(reader, 2) == SegmentIsSealed(2, source, "", src_end)
        assert waiting(h, "t") == []


async def test_a_closing_connection_takes_its_parked_reads_off_the_segment(
    tmp_path: Path,
) -> None:
    """Guards Connection.connection_lost (its parked reads leave the segment); another
    connection's read stays and is still answered."""
    async with harness(tmp_path) as h:
        writer, w, end = await filled(h, "s", 100)
        gone, stays = h.connect(), h.connect()
        await parked(gone, *(ReadSegment("s", end + i, 1000, "", 10 + i) for i in range(20)))
        await parked(stays, ReadSegment("s", end, 1000, "", 40))
        assert len(waiting(h, "s")) == 21
        gone.transport.close()
        await gone.settle(5)
        assert len(waiting(h, "s")) == 1
        writer.send_raw(append(w, 2, 100))
        reply = await answered(stays, 40)
        assert isinstance(reply, SegmentRead) and reply.offset == end and reply.data
        assert waiting(h, "s") == []


async def test_hundreds_of_parked_readers_on_one_segment_each_get_one_answer(
    tmp_path: Path,
) -> None:
    """300 readers (three connections of 100), one append, one reply each, nothing left
    parked."""
    async with harness(tmp_path) as h:
        writer, w, end = await filled(h, "s", 100)
        readers = [h.connect() for _ in range(3)]
        for k, reader in enumerate(readers):
            await parked(
                reader, *(ReadSegment("s", end, 1000, "", 1000 * k + i) for i in range(100))
            )
        assert len(waiting(h, "s")) == 300
        writer.send_raw(append(w, 2, 100))
        await writer.until(lambda: len(acks(writer)) == 2, "ack")
        grown = h.server.ctx.store.info("s").length
        for k, reader in enumerate(readers):
            await reader.until(lambda r=reader: len(r.received) >= 101, "replies")
            for i in range(100):
                [reply] = replies(reader, 1000 * k + i)
                assert isinstance(reply, SegmentRead) and reply.offset == end
                assert len(reply.data) == grown - end and reply.at_tail
        assert waiting(h, "s") == []


async def test_parked_reads_count_as_pending_requests(tmp_path: Path) -> None:
    """Guards the pending-request bound in Connection.process: at max_pending_requests
    parked reads the next command waits; an answer lets it go."""
    async with harness(tmp_path, max_pending_requests=3) as h:
        writer, w, end = await filled(h, "s", 100)
        reader = h.connect()
        reader.send(*(ReadSegment("s", end, 1000, "", 20 + i) for i in range(4)), KeepAlive())
        await reader.settle(20)
        reader.read()
        assert len(waiting(h, "s")) == 3 and len(reader.conn._backlog) == 2
        assert not [c for c in reader.received if isinstance(c, KeepAlive)]
        writer.send_raw(append(w, 2, 100))
        await reader.until(
            lambda: any(isinstance(c, KeepAlive) for c in reader.received), "keepalive"
        )
        # The fourth went after the append: answered from memory, like the first three.
        assert all(replies(reader, 20 + i) for i in range(4))
        assert waiting(h, "s") == []


async def test_a_parked_read_returns_at_most_the_read_cap(tmp_path: Path) -> None:
    """Guards the size of a woken read (the connection's read cap)."""
    async with harness(tmp_path, store_output_bytes=1024 * KiB) as h:
        writer, w, end = await filled(h, "s", 100)
        reader = h.connect()
        h.server.sweep()  # fits the read cap to the connection's share
        cap = reader.conn.read_cap
        await parked(reader, ReadSegment("s", end, 2**31 - 1, "", 31))
        writer.send_raw(append(w, 2, cap + 100 * KiB))
        reply = await answered(reader, 31)
        assert isinstance(reply, SegmentRead) and len(reply.data) == cap
        assert not reply.at_tail
