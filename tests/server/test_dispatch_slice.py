"""Issue 19, round 6: one read's commands are dispatched DISPATCH_SLICE at a time, the rest
in later loop turns, so a burst from one connection does not hold up another connection's
lone append for the whole burst (``Connection.process``).

The order is read from the segment itself: 100 writers on connection A and one on
connection B append to the same segment, B's read arriving right after A's burst; the
offset in B's ack says how many of A's appends went before it."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from segmentstore_client.protocol import (
    CreateSegment,
    DataAppended,
    SetupAppend,
    block_end,
    encode,
    frame_event,
)

from segmentstore.server.connection import DISPATCH_SLICE

from .harness import Harness, Peer, harness

EVENT = frame_event(b"x" * 100)


async def writers_on(h: Harness, peer: Peer, count: int, first_request: int) -> list[uuid.UUID]:
    ids = [uuid.uuid4() for _ in range(count)]
    want = len(peer.received) + count
    peer.send(*(SetupAppend(first_request + i, w, "hot") for i, w in enumerate(ids)))
    await peer.until(lambda: len(peer.received) >= want, "appends set up")
    return ids


async def test_a_lone_append_goes_before_the_rest_of_a_burst(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        a, b = h.connect(), h.connect()
        a.send(CreateSegment(1, "hot", 0, 0))
        await a.until(lambda: len(a.received) >= 2, "created")
        burst = await writers_on(h, a, 100, 1000)
        (lone,) = await writers_on(h, b, 1, 5000)
        a.send_raw(b"".join(encode(block_end(w, EVENT, 1, 1, 1)) for w in burst))
        assert not a.transport.reading  # the rest of the burst waits; the socket is not read
        b.send_raw(encode(block_end(lone, EVENT, 1, 1, 1)))
        await b.until(lambda: any(isinstance(r, DataAppended) for r in b.received), "b's ack")
        await a.until(
            lambda: sum(isinstance(r, DataAppended) for r in a.received) == 100, "a's acks"
        )
        (ack,) = [r for r in b.received if isinstance(r, DataAppended)]
        before = ack.current_segment_write_offset // len(EVENT) - 1
        assert before <= DISPATCH_SLICE, before  # not behind all 100
        offsets = sorted(r.current_segment_write_offset for r in a.received[-100:])
        assert offsets[-1] == 101 * len(EVENT)  # every byte of both stored once


async def test_a_burst_longer_than_a_slice_is_dispatched_in_order(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        a = h.connect()
        a.send(CreateSegment(1, "hot", 0, 0))
        await a.until(lambda: len(a.received) >= 2, "created")
        (w,) = await writers_on(h, a, 1, 1000)
        n = 3 * DISPATCH_SLICE + 5
        a.send_raw(b"".join(encode(block_end(w, EVENT, 1, k, k - 1)) for k in range(1, n + 1)))
        # One slice now, the next in the next loop turn: not only once the first slice's
        # acks are written (after a commit, which in fsync=always is a disk sync).
        assert len(a.conn._backlog) == n - DISPATCH_SLICE
        await asyncio.sleep(0)
        assert len(a.conn._backlog) == n - 2 * DISPATCH_SLICE
        await a.until(lambda: sum(isinstance(r, DataAppended) for r in a.received) == n, "acks")
        acks = [r for r in a.received if isinstance(r, DataAppended)]
        assert [r.event_number for r in acks] == list(range(1, n + 1))
        assert a.transport.reading
