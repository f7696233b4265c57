"""Stopping the server (SIGTERM: clean exit 0; SIGKILL: crash) and starting it again on the
same data directory: everything acknowledged is read back, segment state (sealed,
truncated, attributes) survives, and SetupAppend returns each writer's last event number."""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING

from segmentstore_client.protocol import (
    NULL_ATTRIBUTE_VALUE,
    AppendSetup,
    ConditionalBlockEnd,
    CreateTransientSegment,
    GetSegmentAttribute,
    GetStreamSegmentInfo,
    NoSuchSegment,
    SealSegment,
    SegmentAttribute,
    SegmentAttributeUpdated,
    SegmentCreated,
    SegmentSealed,
    SegmentTruncated,
    SetupAppend,
    TruncateSegment,
    UpdateSegmentAttribute,
    block_end,
    frame_events,
)

from .wire import WireClient, check_per_writer_order, event_payload, next_id, parse_events, unique

if TYPE_CHECKING:
    from conftest import ServerProcess  # tests/conftest.py

KEY = uuid.UUID("00000000-0000-0000-0000-0000000000aa")


async def populate(c: WireClient, writers: list[uuid.UUID], name: str, per_writer: int) -> None:
    for w in writers:
        await c.setup_append(w, name)
    for n in range(1, per_writer + 1, 10):
        for i, w in enumerate(writers):
            records = frame_events(event_payload(i, m, 50 + m % 200) for m in range(n, n + 10))
            c.send(block_end(w, records, 10, n + 9, next_id()))
    for w in writers:
        await c.wait_acked(w, per_writer, timeout=30)


async def check_after_restart(
    c: WireClient, writers: list[uuid.UUID], name: str, per_writer: int
) -> None:
    events = parse_events(await c.read_all(name))
    check_per_writer_order(events, {i: range(1, per_writer + 1) for i in range(len(writers))})
    for w in writers:
        assert await c.setup_append(w, name) == per_writer
    assert await c.setup_append(uuid.uuid4(), name) == NULL_ATTRIBUTE_VALUE


async def test_sigterm_exits_0_and_everything_is_back(server: ServerProcess) -> None:
    name, sealed, truncated = unique(), unique(), unique()
    writers = [uuid.uuid4() for _ in range(3)]
    async with await WireClient.connect(server.host, server.port) as c:
        for s in (name, sealed, truncated):
            await c.create_segment(s)
        await populate(c, writers, name, 300)
        await populate(c, writers[:1], sealed, 20)
        await populate(c, writers[:1], truncated, 20)
        await c.expect(SealSegment(next_id(), sealed, ""), SegmentSealed)
        await c.expect(TruncateSegment(next_id(), truncated, 100, ""), SegmentTruncated)
        await c.expect(
            UpdateSegmentAttribute(next_id(), name, KEY, 42, NULL_ATTRIBUTE_VALUE, ""),
            SegmentAttributeUpdated,
        )
        before = {s: await c.info(s) for s in (name, sealed, truncated)}
        # Appends still in flight when SIGTERM arrives are either acknowledged before the
        # connection closes, or not stored: send some and stop without waiting.
        late = uuid.uuid4()
        await c.setup_append(late, name)
        records = frame_events(event_payload(9, n, 100) for n in range(1, 6))
        c.send(block_end(late, records, 5, 5, next_id()))
        await c.drain()
        assert server.stop() == 0
        await c.wait_closed(10)
        late_acked = c.last_acked(late)
    server.start()
    async with await WireClient.connect(server.host, server.port) as c:
        for s, info in before.items():
            now = await c.info(s)
            assert (now.is_sealed, now.start_offset) == (info.is_sealed, info.start_offset), s
            if s != name:
                assert now.write_offset == info.write_offset, s
        await check_after_restart(c, writers, name, 300)
        late_last = await c.setup_append(late, name)
        if late_acked == 5:
            assert late_last == 5
        assert late_last in (5, NULL_ATTRIBUTE_VALUE)
        reply = await c.expect(GetSegmentAttribute(next_id(), name, KEY, ""), SegmentAttribute)
        assert reply.value == 42
        assert (await c.read_all(truncated)) == (await c.read_all(truncated, 100))
        # Sealed stays sealed: SetupAppend works, appends are refused.
        w = writers[0]
        rid = next_id()
        reply2 = await c.request(SetupAppend(rid, w, sealed, ""))
        assert reply2 == AppendSetup(rid, sealed, w, 20)
    assert any("stopped cleanly" in line for line in server.log)


async def test_sigkill_then_restart_keeps_acknowledged_appends(server: ServerProcess) -> None:
    name = unique()
    writers = [uuid.uuid4() for _ in range(4)]
    async with await WireClient.connect(server.host, server.port) as c:
        await c.create_segment(name)
        await populate(c, writers, name, 500)
    server.kill()
    assert server.proc is not None and server.proc.returncode == -9
    server.start()
    async with await WireClient.connect(server.host, server.port) as c:
        await check_after_restart(c, writers, name, 500)
        # And the writers can continue where they left off.
        for i, w in enumerate(writers):
            c.send(block_end(w, frame_events([event_payload(i, 501, 60)]), 1, 501, next_id()))
        for w in writers:
            await c.wait_acked(w, 501)
    server.kill()
    server.start()
    async with await WireClient.connect(server.host, server.port) as c:
        await check_after_restart(c, writers, name, 501)


async def test_transient_segments_do_not_outlive_a_crash(server: ServerProcess) -> None:
    """A transient segment belongs to the connection that created it (reference 6.4); after
    a restart no connection can own it any more, so it must not be left behind."""
    async with await WireClient.connect(server.host, server.port) as c:
        parent = unique()
        await c.create_segment(parent)
        created = await c.expect(
            CreateTransientSegment(next_id(), uuid.uuid4(), parent, ""), SegmentCreated
        )
        w = uuid.uuid4()
        await c.setup_append(w, created.segment)
        c.send(ConditionalBlockEnd(w, 0, 0, b"half of a large event", next_id()))
        await c.wait_acked(w, 0)
    # The clean path: the connection closed, the segment goes.
    async with await WireClient.connect(server.host, server.port) as c:
        for _ in range(50):
            if isinstance(
                await c.request(GetStreamSegmentInfo(next_id(), created.segment, "")), NoSuchSegment
            ):
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("transient segment outlived its connection")
        orphan = await c.expect(
            CreateTransientSegment(next_id(), uuid.uuid4(), parent, ""), SegmentCreated
        )
        server.kill()  # the crash path: the connection dies with the server
    server.start()
    async with await WireClient.connect(server.host, server.port) as c:
        rid = next_id()
        reply = await c.request(GetStreamSegmentInfo(rid, orphan.segment, ""))
        assert reply == NoSuchSegment(rid, orphan.segment, "", -1), "orphaned transient segment"
        assert (await c.info(parent)).write_offset == 0
