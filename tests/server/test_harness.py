"""The server's Connection in memory (``harness.py``): flow control, pause/resume, ack
order, budgets and timeouts in milliseconds. Each test names the line it guards; the
mutants of issue 14 (the inflight count never decremented, the socket pause removed,
``>`` made ``>=`` on ``last_acked``) each fail one of these (``scripts/mutate.py``)."""

from __future__ import annotations

import uuid
from pathlib import Path

from segmentstore_client.protocol import (
    NULL_ATTRIBUTE_VALUE,
    AppendSetup,
    CreateSegment,
    DataAppended,
    ErrorMessage,
    GetStreamSegmentInfo,
    Hello,
    InvalidEventNumber,
    KeepAlive,
    ReadSegment,
    SegmentCreated,
    SegmentIsSealed,
    SegmentRead,
    SetupAppend,
    StreamSegmentInfo,
    block_end,
    encode,
    frame_event,
)

from .harness import Peer, harness

KiB = 1024
HEADER_OF_1MIB = b"\x00\x00\x00\x03\x00\x10\x00\x00"  # AppendBlock, 1 MiB declared


async def create(peer: Peer, name: str) -> None:
    peer.send(CreateSegment(1, name, 0, 0, ""))
    await peer.until(lambda: any(isinstance(c, SegmentCreated) for c in peer.received), "create")


async def setup(peer: Peer, name: str, w: uuid.UUID) -> int:
    peer.send(SetupAppend(2, w, name, ""))
    await peer.until(lambda: any(isinstance(c, AppendSetup) for c in peer.received), "setup")
    reply = next(c for c in peer.received if isinstance(c, AppendSetup))
    return reply.last_event_number


def acks(peer: Peer) -> list[DataAppended]:
    return [c for c in peer.received if isinstance(c, DataAppended)]


def append(w: uuid.UUID, n: int, size: int) -> bytes:
    return encode(block_end(w, frame_event(b"%d:" % n + b"a" * (size - 16)), 1, n, 100 + n))


async def test_inflight_bytes_come_back_so_a_connection_never_freezes(tmp_path: Path) -> None:
    """Guards ``self.inflight_bytes -= ...`` in Appends._drain and the socket pause: 30 x
    64 KiB through a 256 KiB inflight bound, each a separate socket read."""
    async with harness(tmp_path, connection_inflight_bytes=256 * KiB) as h:
        peer = h.connect()
        await create(peer, "s")
        w = uuid.uuid4()
        await setup(peer, "s", w)
        waited = 0
        for n in range(1, 31):
            peer.send_raw(append(w, n, 64 * KiB))
            waited = max(waited, len(peer.transport.inbox))
        assert waited > 0, "reading was never paused: the inflight bound is not enforced"
        await peer.until(lambda: len(acks(peer)) == 30, "30 acks")
        assert peer.conn.inflight_bytes == 0 and h.server.inflight_budget.used == 0
        assert peer.transport.reading and not peer.transport.inbox


async def test_acks_in_order_with_previous_numbers(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        peer = h.connect()
        await create(peer, "s")
        w = uuid.uuid4()
        assert await setup(peer, "s", w) == NULL_ATTRIBUTE_VALUE
        peer.send_raw(b"".join(append(w, n, 100) for n in range(1, 21)))
        await peer.until(lambda: len(acks(peer)) == 20, "20 acks")
        got = acks(peer)
        assert [a.event_number for a in got] == list(range(1, 21))
        assert [a.previous_event_number for a in got] == [NULL_ATTRIBUTE_VALUE, *range(1, 20)]
        assert [a.request_id for a in got] == [100 + n for n in range(1, 21)]


async def test_resent_acked_event_is_acknowledged_without_storing(tmp_path: Path) -> None:
    """Guards ``number > state.last_acked`` in Appends.appended (``>=`` would send an ack
    whose previous number equals its own)."""
    async with harness(tmp_path) as h:
        first = h.connect()
        await create(first, "s")
        w = uuid.uuid4()
        await setup(first, "s", w)
        first.send_raw(b"".join(append(w, n, 100) for n in (1, 2, 3)))
        await first.until(lambda: len(acks(first)) == 3, "3 acks")
        length = h.server.ctx.store.info("s").length
        second = h.connect()
        assert await setup(second, "s", w) == 3
        second.send_raw(append(w, 3, 100) + append(w, 4, 100))
        await second.until(lambda: len(acks(second)) == 2, "2 acks")
        resent, new = acks(second)
        assert (resent.event_number, resent.request_id) == (3, 103)
        assert resent.previous_event_number < 3
        assert resent.current_segment_write_offset == length
        assert (new.event_number, new.previous_event_number) == (4, 3)
        assert h.server.ctx.metrics.duplicate_appends == 1
        assert h.server.ctx.store.info("s").length == length + length // 3


async def test_reader_that_does_not_read_pauses_the_socket(tmp_path: Path) -> None:
    """Guards the output side: replies over the high-water mark stop the dispatch of
    reads and pause reading; the peer reading its replies resumes both."""
    async with harness(tmp_path, connection_write_buffer_bytes=256 * KiB) as h:
        peer = h.connect()
        await create(peer, "s")
        w = uuid.uuid4()
        await setup(peer, "s", w)
        peer.send_raw(b"".join(append(w, n, 64 * KiB) for n in range(1, 17)))
        await peer.until(lambda: len(acks(peer)) == 16, "16 acks")
        peer.read()
        for i in range(40):
            peer.send(ReadSegment("s", (i % 16) * 64 * KiB, 64 * KiB, "", 1000 + i))
        await peer.settle()
        assert not peer.transport.reading and peer.transport.inbox
        queued = len(peer.transport.outbox)
        assert queued <= 256 * KiB + 2 * 64 * KiB + 4 * KiB, queued
        await peer.until(
            lambda: sum(isinstance(c, SegmentRead) for c in peer.received) == 40, "40 reads"
        )
        assert peer.transport.reading and not peer.transport.inbox
        assert h.server.output_budget.used == len(peer.transport.outbox) == 0


async def test_store_wide_inflight_budget_pauses_every_connection(tmp_path: Path) -> None:
    async with harness(tmp_path, store_inflight_bytes=256 * KiB) as h:
        peers = [h.connect() for _ in range(3)]
        await create(peers[0], "s")
        writers = [uuid.uuid4() for _ in peers]
        for p, w in zip(peers, writers, strict=True):
            await setup(p, "s", w)
        for n in range(1, 9):
            for p, w in zip(peers, writers, strict=True):
                p.send_raw(append(w, n, 64 * KiB))
        assert h.server.inflight_budget.peak <= 256 * KiB + 3 * 64 * KiB
        assert sum(bool(p.transport.inbox) for p in peers) >= 2  # each under its own 32 MiB
        for p in peers:
            await p.until(lambda p=p: len(acks(p)) == 8, "8 acks")
        assert h.server.inflight_budget.used == 0


async def test_timeouts_follow_the_injected_clock(tmp_path: Path) -> None:
    settings = {"hello_timeout_s": 5, "frame_timeout_s": 7, "write_stall_timeout_s": 9}
    async with harness(tmp_path, connection_write_buffer_bytes=64 * KiB, **settings) as h:
        silent = h.connect(hello=False)
        half = h.connect()
        half.send_raw(encode(KeepAlive())[:5])
        good = h.connect()
        stalled = h.connect()
        await create(stalled, "s")
        h.server.sweep()
        assert not any(p.transport.aborted for p in (silent, half, good, stalled))
        h.clock.advance(5.5)
        h.server.sweep()
        assert silent.transport.aborted and not half.transport.aborted
        h.clock.advance(2)
        h.server.sweep()
        assert half.transport.aborted and not good.transport.aborted
        w = uuid.uuid4()
        await setup(stalled, "s", w)
        stalled.send_raw(append(w, 1, 200 * KiB))
        await stalled.until(lambda: len(acks(stalled)) == 1, "ack")
        stalled.send_raw(b"".join(encode(ReadSegment("s", 0, 200 * KiB, "", i)) for i in range(4)))
        await stalled.until(lambda: stalled.transport.writing_paused, "paused", read=False)
        h.clock.advance(9.5)
        h.server.sweep()
        assert stalled.transport.aborted and not good.transport.aborted
        await good.settle()
        # What is left is the good peer's unread Hello.
        assert h.server.output_budget.used == len(good.transport.outbox) == 16
        assert h.server.input_budget.used == 0
        good.send(KeepAlive())
        await good.until(lambda: any(isinstance(c, KeepAlive) for c in good.received), "pong")
        assert h.server.ctx.metrics.timeouts == {"hello": 1, "frame": 1, "write": 1}


async def test_unexpected_exception_in_a_handler_is_answered(tmp_path: Path) -> None:
    async def broken(ctx: object, cmd: GetStreamSegmentInfo) -> StreamSegmentInfo:
        raise ZeroDivisionError("boom")

    async with harness(tmp_path) as h:
        h.server.handlers[GetStreamSegmentInfo] = broken
        peer = h.connect()
        peer.send(GetStreamSegmentInfo(7, "s", ""), KeepAlive())
        await peer.until(lambda: any(isinstance(c, ErrorMessage) for c in peer.received), "error")
        error = next(c for c in peer.received if isinstance(c, ErrorMessage))
        assert error.request_id == 7 and error.error_code == -1 and "boom" in error.message
        assert not peer.closed and isinstance(peer.received[0], Hello)


async def test_repeated_and_backward_event_numbers_are_rejected(tmp_path: Path) -> None:
    """Guards Appends.precheck and the REPEATED transition: InvalidEventNumber, then close;
    nothing stored twice."""
    async with harness(tmp_path) as h:
        for number in (3, 2):
            peer = h.connect()
            name = f"s{number}"
            await create(peer, name)
            w = uuid.uuid4()
            await setup(peer, name, w)
            peer.send_raw(b"".join(append(w, n, 100) for n in (1, 2, 3)))
            await peer.until(lambda p=peer: len(acks(p)) == 3, "3 acks")
            length = h.server.ctx.store.info(name).length
            peer.send_raw(append(w, number, 100))
            await peer.until(lambda p=peer: p.closed, "close")
            assert peer.received[-1] == InvalidEventNumber(w, 100 + number, "", number)
            assert h.server.ctx.store.info(name).length == length


async def test_a_closed_connection_gives_everything_back(tmp_path: Path) -> None:
    """Guards Connection.connection_lost: budgets refunded, tasks cancelled, counted."""
    async with harness(tmp_path, connection_write_buffer_bytes=64 * KiB) as h:
        peer = h.connect()
        await create(peer, "s")
        w = uuid.uuid4()
        await setup(peer, "s", w)
        peer.send_raw(append(w, 1, 200 * KiB))
        await peer.until(lambda: len(acks(peer)) == 1, "ack")
        tail = h.server.ctx.store.info("s").length
        peer.send(ReadSegment("s", tail, 1000, "", 50))  # parked at the tail
        peer.send(ReadSegment("s", 0, 200 * KiB, "", 51))  # unread output
        peer.send_raw(encode(KeepAlive()) + HEADER_OF_1MIB + b"\0" * 1000)  # partial frame
        await peer.until(lambda: peer.transport.writing_paused, "paused", read=False)
        assert h.server.input_budget.used > 0 and h.server.output_budget.used > 0
        tasks = set(peer.conn._tasks)
        assert tasks
        assert h.server.ctx.metrics.connections == 1
        peer.transport.close()  # the peer goes away
        await peer.settle(5)
        assert not h.server.connections and h.server.ctx.metrics.connections == 0
        assert h.server.input_budget.used == 0 and h.server.output_budget.used == 0
        assert all(t.cancelled() for t in tasks)


async def test_bad_frames_close_without_a_reply(tmp_path: Path) -> None:
    """Guards the protocol_error calls in data_received and process."""
    async with harness(tmp_path) as h:
        junk = h.connect()
        junk.send_raw(b"\x00\x00\x1e\x61" + b"\0" * 12)  # unknown type code 7777
        reply_type = h.connect()
        reply_type.send(KeepAlive(), SegmentCreated(5, "x"), KeepAlive())
        for peer in (junk, reply_type):
            await peer.until(lambda p=peer: p.closed, "close")
            assert not [c for c in peer.received if not isinstance(c, Hello | KeepAlive)]
        assert h.server.ctx.metrics.protocol_errors == 2
        assert [type(c) for c in reply_type.received] == [Hello, KeepAlive]


async def test_unexpected_exception_in_the_dispatch_is_answered(tmp_path: Path) -> None:
    """Guards the catch-all in Connection.process (a synchronous path: SetupAppend)."""
    async with harness(tmp_path) as h:
        peer = h.connect()
        await create(peer, "s")
        store = h.server.ctx.store

        def broken(name: str, writer: uuid.UUID) -> int:
            raise RuntimeError("attribute index exploded")

        store.get_attribute = broken  # type: ignore[method-assign]
        peer.send(SetupAppend(9, uuid.uuid4(), "s", ""), KeepAlive())
        await peer.until(lambda: isinstance(peer.received[-1], KeepAlive), "pong")
        error = peer.received[-2]
        assert isinstance(error, ErrorMessage) and error.request_id == 9
        assert "attribute index exploded" in error.message and not peer.closed


async def test_store_wide_input_budget_pauses_partial_frames(tmp_path: Path) -> None:
    """Guards the input budget in data_received: over it, a connection holding more than
    the floor stops being read until another's frame completes."""
    async with harness(tmp_path, store_input_bytes=256 * KiB) as h:
        peers = [h.connect(), h.connect()]
        await create(peers[0], "s")
        writers = [uuid.uuid4(), uuid.uuid4()]
        frames = []
        for p, w in zip(peers, writers, strict=True):
            await setup(p, "s", w)
            frames.append(append(w, 1, 1024 * KiB))
        peers[0].send_raw(frames[0][: 200 * KiB])
        peers[1].send_raw(frames[1][: 200 * KiB])
        assert h.server.input_budget.used == 400 * KiB
        assert peers[0].transport.reading and not peers[1].transport.reading
        peers[1].send_raw(frames[1][200 * KiB :])  # waits: the socket is not read
        assert peers[1].transport.inbox
        peers[0].send_raw(frames[0][200 * KiB :])  # completes: the budget has room again
        for p in peers:
            await p.until(lambda p=p: len(acks(p)) == 1, "ack")
        assert h.server.input_budget.used == 0 and peers[1].transport.reading


async def test_append_to_a_sealed_segment_ends_the_session(tmp_path: Path) -> None:
    """Guards Appends._drain's failure path: SegmentIsSealed for the writer's append, the
    session dropped (more data for it closes the connection, reference 7.9)."""
    async with harness(tmp_path) as h:
        peer = h.connect()
        await create(peer, "s")
        w = uuid.uuid4()
        await setup(peer, "s", w)
        await h.server.ctx.store.seal("s")
        peer.send_raw(append(w, 1, 100))
        await peer.until(lambda: isinstance(peer.received[-1], SegmentIsSealed), "sealed")
        assert peer.received[-1] == SegmentIsSealed(101, "s", "", 1)
        assert not peer.closed
        peer.send_raw(append(w, 2, 100))
        await peer.until(lambda: peer.closed, "close")


async def test_sweep_fits_high_water_to_the_fair_share(tmp_path: Path) -> None:
    """Guards the retune in Connection.check_timeouts: more connections, smaller shares."""
    async with harness(tmp_path, store_output_bytes=4096 * KiB) as h:
        first = h.connect()
        h.server.sweep()
        alone = first.transport.high
        others = [h.connect() for _ in range(15)]
        h.server.sweep()
        assert first.transport.high < alone
        assert first.transport.high == others[0].transport.high == 128 * KiB
        assert first.conn.read_cap == 128 * KiB


async def test_reads_from_chunk_files_wait_for_output_room(tmp_path: Path) -> None:
    """Guards Connection.reserve_output: reads that miss the cache (served from chunk
    files) reserve their size first, so a peer that does not read gets one at a time."""
    store = {"read_cache_bytes": 256 * KiB, "flush_bytes": 128 * KiB}
    async with harness(tmp_path, store=store, connection_write_buffer_bytes=64 * KiB) as h:
        peer = h.connect()
        await create(peer, "s")
        w = uuid.uuid4()
        await setup(peer, "s", w)
        for n in range(1, 33):
            peer.send_raw(append(w, n, 64 * KiB))
            await peer.until(lambda n=n: len(acks(peer)) == n, "ack")
        segments = h.server.ctx.store
        await peer.until(lambda: segments.try_read("s", 0, 1024) is None, "evicted", read=False)
        peer.read()
        for i in range(10):
            peer.send(ReadSegment("s", i * 128 * KiB, 128 * KiB, "", 500 + i))
        await peer.until(lambda: peer.transport.writing_paused, "paused", read=False)
        for _ in range(200):  # the disk reads that could go have gone
            await peer.settle()
        held = len(peer.transport.outbox)
        assert held <= 64 * KiB + 2 * 128 * KiB + 4 * KiB, held
        await peer.until(
            lambda: sum(isinstance(c, SegmentRead) for c in peer.received) == 10, "10 reads"
        )
        assert [c.request_id for c in peer.received if isinstance(c, SegmentRead)] == [
            500 + i for i in range(10)
        ]
