"""Reads at the tail of a segment (reference 8.1): parked until data lands, answered at once
when it does, answered empty with atTail after the server's tail timeout, and answered
SegmentIsSealed when the segment is sealed under them."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import pytest
from segmentstore_client.protocol import (
    DeleteSegment,
    ReadSegment,
    SealSegment,
    SegmentDeleted,
    SegmentIsSealed,
    SegmentRead,
    SegmentSealed,
    block_end,
    frame_event,
    frame_events,
)

from .wire import WireClient, next_id, unique

if TYPE_CHECKING:
    from conftest import ServerFactory, ServerProcess  # tests/conftest.py


@pytest.mark.serial  # timing bounds: scripts/test runs it alone
async def test_tail_read_is_answered_as_soon_as_data_lands(module_server: ServerProcess) -> None:
    host, port = module_server.host, module_server.port
    name = unique()
    async with (
        await WireClient.connect(host, port) as reader,
        await WireClient.connect(host, port) as writer,
    ):
        await writer.create_segment(name)
        w = uuid.uuid4()
        await writer.setup_append(w, name)
        offset = 0
        delays: list[float] = []
        for i in range(20):
            rid = next_id()
            reader.send(ReadSegment(name, offset, 1 << 20, "", rid))
            await reader.drain()
            # Give the read time to park, then append.
            await writer.keepalive()
            await reader.keepalive()
            assert reader.by_id(rid) == []
            payload = f"tail-{i}".encode()
            t0 = time.perf_counter()
            writer.send(block_end(w, frame_event(payload), 1, i + 1, next_id()))
            reply = await reader.reply_to(rid, timeout=5)
            delays.append(time.perf_counter() - t0)
            assert reply == SegmentRead(name, offset, True, False, frame_event(payload), rid)
            assert isinstance(reply, SegmentRead)
            offset += len(reply.data)
        await writer.wait_acked(w, 20)
    delays.sort()
    # The server parks a tail read up to its 10 s timeout; data must wake it at once.
    assert delays[-1] < 1.0, delays
    assert delays[len(delays) // 2] < 0.2, delays


async def test_tail_read_times_out_empty_with_at_tail(server_factory: ServerFactory) -> None:
    server = server_factory(extra_args=["--tail-read-timeout-s", "1"])
    server.start()
    name = unique()
    async with await WireClient.connect(server.host, server.port) as c:
        await c.create_segment(name)
        w = uuid.uuid4()
        await c.setup_append(w, name)
        c.send(block_end(w, frame_events([b"abc"]), 1, 1, next_id()))
        await c.wait_acked(w, 1)
        rid = next_id()
        t0 = time.perf_counter()
        reply = await c.request(ReadSegment(name, 11, 1000, "", rid), timeout=10)
        waited = time.perf_counter() - t0
        assert reply == SegmentRead(name, 11, True, False, b"", rid)
        assert 0.8 <= waited < 3.0, waited
        # Several parked reads on one connection each get exactly one answer.
        rids = [next_id() for _ in range(5)]
        c.send(*(ReadSegment(name, 11, 1000, "", r) for r in rids))
        await c.wait_until(lambda: all(c.by_id(r) for r in rids), timeout=10)
        for r in rids:
            assert c.by_id(r) == [SegmentRead(name, 11, True, False, b"", r)]


@contextlib.asynccontextmanager
async def _parked_read(
    server: ServerProcess,
) -> AsyncIterator[tuple[WireClient, WireClient, str, int]]:
    """A fresh segment with a ReadSegment parked at its tail: (reader, admin, name, rid)."""
    async with (
        await WireClient.connect(server.host, server.port) as reader,
        await WireClient.connect(server.host, server.port) as admin,
    ):
        name = unique()
        await admin.create_segment(name)
        rid = next_id()
        reader.send(ReadSegment(name, 0, 1000, "", rid))
        await reader.keepalive()  # the read is parked once the keepalive is answered
        yield reader, admin, name, rid


async def test_sealing_a_parked_read_answers_segment_is_sealed(
    module_server: ServerProcess,
) -> None:
    async with _parked_read(module_server) as (reader, admin, name, rid):
        t0 = time.perf_counter()
        await admin.expect(SealSegment(next_id(), name, ""), SegmentSealed)
        reply = await reader.reply_to(rid, timeout=5)
        assert time.perf_counter() - t0 < 1.0
        assert reply == SegmentIsSealed(rid, name, "", 0)
        # Afterwards a read at the end says endOfSegment.
        rid = next_id()
        reply = await reader.request(ReadSegment(name, 0, 1000, "", rid))
        assert reply == SegmentRead(name, 0, False, True, b"", rid)


async def test_deleting_under_a_parked_read_answers_empty(module_server: ServerProcess) -> None:
    async with _parked_read(module_server) as (reader, admin, name, rid):
        t0 = time.perf_counter()
        await admin.expect(DeleteSegment(next_id(), name, ""), SegmentDeleted)
        reply = await reader.reply_to(rid, timeout=15)
        # Reference 8.1: a read cancelled by a delete is answered with an empty tail read.
        assert reply == SegmentRead(name, 0, True, False, b"", rid)
        assert time.perf_counter() - t0 < 1.0, "the parked read was not woken by the delete"


async def test_tail_read_beyond_the_end_waits_for_data(module_server: ServerProcess) -> None:
    """A read past the current end of an unsealed segment is a future read too (8.1)."""
    host, port = module_server.host, module_server.port
    name = unique()
    async with await WireClient.connect(host, port) as c:
        await c.create_segment(name)
        w = uuid.uuid4()
        await c.setup_append(w, name)
        rid = next_id()
        c.send(ReadSegment(name, 5, 1000, "", rid))
        await c.keepalive()
        assert c.by_id(rid) == [], c.received
        c.send(block_end(w, frame_event(b"0123456789"), 1, 1, next_id()))
        reply = await c.reply_to(rid, timeout=5)
        assert reply == SegmentRead(name, 5, True, False, frame_event(b"0123456789")[5:], rid)


async def test_hundreds_of_parked_reads_and_a_connection_closing_with_reads_parked(
    module_server: ServerProcess,
) -> None:
    """300 reads parked on one segment over three connections, one of them closed while
    its reads are parked: one append answers each read still there exactly once, and the
    segment goes on serving tail reads (a later append wakes a later read)."""
    host, port = module_server.host, module_server.port
    name, w = unique(), uuid.uuid4()
    readers = [await WireClient.connect(host, port) for _ in range(3)]
    try:
        async with await WireClient.connect(host, port) as writer:
            await writer.create_segment(name)
            await writer.setup_append(w, name)
            rids = [[next_id() for _ in range(100)] for _ in readers]
            for reader, ids in zip(readers, rids, strict=True):
                reader.send(*(ReadSegment(name, 0, 1000, "", r) for r in ids))
                await reader.keepalive()  # its reads are parked once this is answered
            gone = readers.pop()
            rids.pop()
            await gone.close()
            await readers[0].keepalive()
            assert all(not r.by_id(i) for r, ids in zip(readers, rids, strict=True) for i in ids)
            event = frame_event(b"for-everyone")
            writer.send(block_end(w, event, 1, 1, next_id()))
            for reader, ids in zip(readers, rids, strict=True):
                await reader.wait_until(lambda r=reader, ids=ids: all(r.by_id(i) for i in ids))
                for i in ids:
                    assert reader.by_id(i) == [SegmentRead(name, 0, True, False, event, i)]
            rid = next_id()
            readers[0].send(ReadSegment(name, len(event), 1000, "", rid))
            await readers[0].keepalive()
            writer.send(block_end(w, frame_event(b"later"), 1, 2, next_id()))
            reply = await readers[0].reply_to(rid, timeout=5)
            assert reply == SegmentRead(name, len(event), True, False, frame_event(b"later"), rid)
            await writer.wait_acked(w, 2)
    finally:
        for reader in readers:
            await reader.close()
