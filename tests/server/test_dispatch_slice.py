"""Issue 19, round 7: a backlog of decoded commands is dispatched for at most
``DISPATCH_SLICE_S`` of loop time per call (at least one command), the rest in later loop
turns, so a burst from one connection holds up neither another connection's lone append
nor the log thread's eventfd callback for the whole burst (``Connection.process``).

The order is read from the segment itself: 100 writers on connection A and one on
connection B append to the same segment, B's read arriving right after A's burst; the
offset in B's ack says how many of A's appends went before it. The ordering tests set the
slice to 0 (one command per call), so they do not depend on the machine's speed."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from segmentstore_client.protocol import (
    CreateSegment,
    DataAppended,
    SetupAppend,
    block_end,
    encode,
    frame_event,
)

from segmentstore.server import connection

from .harness import Harness, Peer, harness

EVENT = frame_event(b"x" * 100)


async def writers_on(h: Harness, peer: Peer, count: int, first_request: int) -> list[uuid.UUID]:
    ids = [uuid.uuid4() for _ in range(count)]
    want = len(peer.received) + count
    peer.send(*(SetupAppend(first_request + i, w, "hot") for i, w in enumerate(ids)))
    await peer.until(lambda: len(peer.received) >= want, "appends set up")
    return ids


async def created(h: Harness) -> Peer:
    a = h.connect()
    a.send(CreateSegment(1, "hot", 0, 0))
    await a.until(lambda: len(a.received) >= 2, "created")
    return a


def acks(peer: Peer) -> list[DataAppended]:
    return [r for r in peer.received if isinstance(r, DataAppended)]


async def test_a_lone_append_goes_before_the_rest_of_a_burst(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connection, "DISPATCH_SLICE_S", 0.0)
    async with harness(tmp_path) as h:
        a = await created(h)
        b = h.connect()
        burst = await writers_on(h, a, 100, 1000)
        (lone,) = await writers_on(h, b, 1, 5000)
        a.send_raw(b"".join(encode(block_end(w, EVENT, 1, 1, 1)) for w in burst))
        assert not a.transport.reading  # the rest of the burst waits; the socket is not read
        assert len(a.conn._backlog) == 99
        b.send_raw(encode(block_end(lone, EVENT, 1, 1, 1)))
        await b.until(lambda: len(acks(b)) == 1, "b's ack")
        await a.until(lambda: len(acks(a)) == 100, "a's acks")
        before = acks(b)[0].current_segment_write_offset // len(EVENT) - 1
        assert before == 1, before  # behind one command of the burst, not all 100
        offsets = sorted(r.current_segment_write_offset for r in acks(a))
        assert offsets[-1] == 101 * len(EVENT)  # every byte of both stored once
        assert a.transport.reading


async def test_a_backlog_goes_on_without_the_socket_and_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connection, "DISPATCH_SLICE_S", 0.0)
    async with harness(tmp_path) as h:
        a = await created(h)
        (w,) = await writers_on(h, a, 1, 1000)
        n = 50
        a.send_raw(b"".join(encode(block_end(w, EVENT, 1, k, k - 1)) for k in range(1, n + 1)))
        assert len(a.conn._backlog) == n - 1
        # The next slice comes from the loop, not only once acks are written (after a
        # commit, which in fsync=always is a disk sync).
        await asyncio.sleep(0)
        assert len(a.conn._backlog) < n - 1
        await a.until(lambda: len(acks(a)) == n, "acks")
        assert [r.event_number for r in acks(a)] == list(range(1, n + 1))
        assert [r.current_segment_write_offset for r in acks(a)] == [
            k * len(EVENT) for k in range(1, n + 1)
        ]
        assert not a.conn._backlog and a.transport.reading


async def test_the_default_slice_bounds_one_call(tmp_path: Path) -> None:
    # 2,000 appends take milliseconds of dispatch on any machine: far over the slice.
    assert connection.DISPATCH_SLICE_S <= 0.001
    async with harness(tmp_path) as h:
        a = await created(h)
        (w,) = await writers_on(h, a, 1, 1000)
        n = 2000
        a.send_raw(b"".join(encode(block_end(w, EVENT, 1, k, k - 1)) for k in range(1, n + 1)))
        assert 0 < len(a.conn._backlog) < n - 1
        await a.until(lambda: len(acks(a)) == n, "acks")
        assert acks(a)[-1].current_segment_write_offset == n * len(EVENT)
