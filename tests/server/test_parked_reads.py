"""Tail reads parked without a task (server/reads.py ``ParkedRead``, issue 19), through the
in-memory harness: every rule of a parked read (reference 8.1) holds on this path, each
read gets exactly one answer, nothing is left on a segment's waiter list, parked reads
count as pending requests, and a commit's acks are written before the replies it woke.
Each test names the line it guards."""

from __future__ import annotations

from pathlib import Path

from segmentstore_client.protocol import (
    KeepAlive,
    MergeSegments,
    ReadSegment,
    SegmentIsSealed,
    SegmentRead,
    SegmentsMerged,
)

from segmentstore.storage.metadata import Waiter

from .harness import Harness, Peer, harness
from .test_harness import KiB, acks, append
from .test_harness_reads import answered, filled, replies


def waiters(h: Harness, name: str) -> list[Waiter] | None:
    return h.server.ctx.store._route(name)._segments[name].waiters


async def parked(peer: Peer, *reads: ReadSegment) -> None:
    """Send ``reads`` and check they are parked: no task, no reply."""
    peer.send(*reads)
    await peer.settle(20)
    rids = {r.request_id for r in reads}
    assert rids <= {p.command.request_id for p in peer.conn.reads.parked}
    assert not peer.conn._tasks
    peer.read()
    assert not [c for c in peer.received if getattr(c, "request_id", None) in rids]


async def test_a_merge_wakes_the_targets_reads_and_seals_the_sources(
    tmp_path: Path,
) -> None:
    """Guards CommitLoop.on_woken (merge: the target grows; the source is sealed first, in
    its own record, so a read parked at its end is answered SegmentIsSealed)."""
    async with harness(tmp_path) as h:
        peer, _, end = await filled(h, "t", 100)
        _, _, src_end = await filled(h, "t#transaction.00000000000000000000000000000001", 50)
        source = "t#transaction.00000000000000000000000000000001"
        reader = h.connect()
        await parked(
            reader, ReadSegment("t", end, 1000, "", 1), ReadSegment(source, src_end, 1000, "", 2)
        )
        peer.send(MergeSegments(3, "t", source))
        merged = await answered(peer, 3)
        assert isinstance(merged, SegmentsMerged)
        reply = await answered(reader, 1)
        assert isinstance(reply, SegmentRead) and reply.offset == end and reply.at_tail
        assert len(reply.data) == src_end
        assert await answered(reader, 2) == SegmentIsSealed(2, source, "", src_end)
        assert not reader.conn.reads.parked and waiters(h, "t") is None


async def test_a_closing_connection_takes_its_parked_reads_off_the_segment(
    tmp_path: Path,
) -> None:
    """Guards Reads.release (from connection_lost): the closed connection's waiters leave
    the segment, another connection's stay and are still answered."""
    async with harness(tmp_path) as h:
        writer, w, end = await filled(h, "s", 100)
        gone, stays = h.connect(), h.connect()
        await parked(gone, *(ReadSegment("s", end + i, 1000, "", 10 + i) for i in range(20)))
        await parked(stays, ReadSegment("s", end, 1000, "", 40))
        assert len(waiters(h, "s") or []) == 21
        gone.transport.close()
        await gone.settle(5)
        assert not gone.conn.reads.parked
        assert [x.offset for x in waiters(h, "s") or []] == [end]
        writer.send_raw(append(w, 2, 100))
        reply = await answered(stays, 40)
        assert isinstance(reply, SegmentRead) and reply.offset == end and reply.data
        assert waiters(h, "s") is None and not stays.conn.reads.parked


async def test_hundreds_of_parked_readers_on_one_segment_each_get_one_answer(
    tmp_path: Path,
) -> None:
    """Guards SegmentMeta.wake_waiters and EarlyFlush.flush_all's answers: 300 readers
    (three connections of 100), one append, one reply each, nothing left parked."""
    async with harness(tmp_path) as h:
        writer, w, end = await filled(h, "s", 100)
        readers = [h.connect() for _ in range(3)]
        for k, reader in enumerate(readers):
            await parked(
                reader, *(ReadSegment("s", end, 1000, "", 1000 * k + i) for i in range(100))
            )
        assert len(waiters(h, "s") or []) == 300
        writer.send_raw(append(w, 2, 100))
        await writer.until(lambda: len(acks(writer)) == 2, "ack")
        grown = h.server.ctx.store.info("s").length
        for k, reader in enumerate(readers):
            await reader.until(lambda r=reader: len(r.received) >= 101, "replies")
            for i in range(100):
                [reply] = replies(reader, 1000 * k + i)
                assert isinstance(reply, SegmentRead) and reply.offset == end
                assert len(reply.data) == grown - end and reply.at_tail
            assert not reader.conn.reads.parked
        assert waiters(h, "s") is None


async def test_parked_reads_count_as_pending_requests(tmp_path: Path) -> None:
    """Guards ``len(parked)`` in Connection.process: at max_pending_requests parked reads
    the next command waits; an answer lets it go (its reply's flush runs the backlog)."""
    async with harness(tmp_path, max_pending_requests=3) as h:
        writer, w, end = await filled(h, "s", 100)
        reader = h.connect()
        reader.send(*(ReadSegment("s", end, 1000, "", 20 + i) for i in range(4)), KeepAlive())
        await reader.settle(20)
        reader.read()
        assert len(reader.conn.reads.parked) == 3 and len(reader.conn._backlog) == 2
        assert not [c for c in reader.received if isinstance(c, KeepAlive)]
        writer.send_raw(append(w, 2, 100))
        await reader.until(
            lambda: any(isinstance(c, KeepAlive) for c in reader.received), "keepalive"
        )
        # The fourth went after the append: answered from memory, like the first three.
        assert all(replies(reader, 20 + i) for i in range(4))
        assert not reader.conn.reads.parked


async def test_a_read_woken_and_timed_out_in_one_turn_is_answered_once(tmp_path: Path) -> None:
    """Guards the ``parked.remove`` check in Reads.answer: the sweep times a read out
    after its commit woke it but before EarlyFlush answered it; one reply, with the data."""
    async with harness(tmp_path, tail_read_timeout_s=5) as h:
        writer, w, end = await filled(h, "s", 100)
        reader = h.connect()
        await parked(reader, ReadSegment("s", end, 1000, "", 30))
        early = h.server.early_flush
        writer.send_raw(append(w, 2, 100))
        await writer.until(lambda: bool(early._woken), "woken", read=False)
        h.clock.advance(6)
        h.server.sweep()  # answers it first ...
        await writer.until(lambda: not early._woken, "answered", read=False)  # ... then again?
        await reader.settle(5)
        reader.read()
        [reply] = replies(reader, 30)
        assert isinstance(reply, SegmentRead) and reply.offset == end and reply.data


async def test_a_parked_read_returns_at_most_the_read_cap(tmp_path: Path) -> None:
    """Guards Reads.answer's size (the connection's read cap when it is answered)."""
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


async def test_a_timed_out_read_whose_data_is_only_on_disk_reads_the_chunk_files(
    tmp_path: Path,
) -> None:
    """Guards the ``result is None`` branch of Reads.answer: a read given up on (here:
    taken off the segment, so no commit wakes it) after its bytes came and left the cache
    is answered from the chunk files, through the disk guard."""
    store = {"read_cache_bytes": 256 * KiB, "flush_bytes": 128 * KiB}
    async with harness(tmp_path, store=store, tail_read_timeout_s=5) as h:
        writer, w, end = await filled(h, "s", 100)
        reader = h.connect()
        await parked(reader, ReadSegment("s", end, 1000, "", 32))
        [read] = reader.conn.reads.parked
        assert read.waiter is not None
        h.server.ctx.store.unpark(read.waiter)
        for n in range(2, 14):
            writer.send_raw(append(w, n, 64 * KiB))
        await writer.until(lambda: len(acks(writer)) == 13, "acks")
        segments = h.server.ctx.store
        await writer.until(lambda: segments.try_read("s", end, 10) is None, "evicted", read=False)
        h.clock.advance(6)
        h.server.sweep()
        reply = await answered(reader, 32)
        assert isinstance(reply, SegmentRead) and reply.offset == end and len(reply.data) == 1000
        assert reader.conn._reserved == 0


async def test_a_commits_acks_are_written_before_the_replies_it_wakes(tmp_path: Path) -> None:
    """Guards the order of CommitLoop._apply (futures, then waiters) and of
    EarlyFlush.flush_all (queued output, then woken reads): the writer's ack goes to its
    socket before the reader's reply, in the same flush."""
    async with harness(tmp_path) as h:
        writer, w, end = await filled(h, "s", 100)
        reader = h.connect()
        await parked(reader, ReadSegment("s", end, 1000, "", 33))
        writes: list[str] = []
        for name, peer in (("ack", writer), ("reply", reader)):
            write = peer.transport.write
            peer.transport.write = lambda data, name=name, write=write: (  # type: ignore[method-assign]
                writes.append(name),
                write(data),
            )
        writer.send_raw(append(w, 2, 100))
        await answered(reader, 33)
        assert writes == ["ack", "reply"]


async def test_the_sweep_runs_often_enough_for_the_tail_timeout(tmp_path: Path) -> None:
    """Guards the tail timeout in Server.sweep_interval: a parked read is late by at most
    one sweep interval."""
    async with harness(tmp_path, tail_read_timeout_s=0.4) as h:
        assert h.server.sweep_interval() <= 0.05
