"""Every request the server answers, with its success reply and each of its error replies
(wire-protocol reference sections 4, 5, 6, 7, 8 and 12), over a raw socket.
"""

from __future__ import annotations

import asyncio
import functools
import re
import time
import uuid
from typing import TYPE_CHECKING

from segmentstore_client.protocol import (
    NULL_ATTRIBUTE_VALUE,
    AppendBlock,
    AppendBlockEnd,
    AppendSetup,
    Command,
    ConditionalAppend,
    ConditionalAttributeUpdate,
    ConditionalBlockEnd,
    ConditionalCheckFailed,
    CreateSegment,
    CreateTransientSegment,
    DataAppended,
    DeleteSegment,
    FlushToStorage,
    GetSegmentAttribute,
    GetStreamSegmentInfo,
    Hello,
    KeepAlive,
    LocateOffset,
    MergeSegments,
    MergeSegmentsBatch,
    NoSuchSegment,
    OffsetLocated,
    Padding,
    ReadSegment,
    SealSegment,
    SegmentAlreadyExists,
    SegmentAttribute,
    SegmentAttributeUpdated,
    SegmentCreated,
    SegmentDeleted,
    SegmentIsSealed,
    SegmentIsTruncated,
    SegmentPolicyUpdated,
    SegmentRead,
    SegmentsBatchMerged,
    SegmentSealed,
    SegmentsMerged,
    SegmentTruncated,
    SetupAppend,
    StorageFlushed,
    StreamSegmentInfo,
    TruncateSegment,
    UpdateSegmentAttribute,
    UpdateSegmentPolicy,
    block_end,
    build_blocks,
    encode,
    frame_event,
    frame_events,
)

from .wire import WireClient, next_id, parse_events, unique

if TYPE_CHECKING:
    from conftest import ServerProcess  # tests/conftest.py

EVENT_COUNT = uuid.UUID("80000000-0000-0000-0000-000000000001")
CREATION_TIME = uuid.UUID("80000000-0000-0000-0000-000000000000")
SCALE_POLICY_TYPE = uuid.UUID("80000000-0000-0000-0000-000000000002")
SCALE_POLICY_RATE = uuid.UUID("80000000-0000-0000-0000-000000000003")
REPLACE_IF_EQUALS = 4


def has_request_id(request_id: int, frame: Command) -> bool:
    return getattr(frame, "request_id", None) == request_id


async def attr(c: WireClient, segment: str, attribute: uuid.UUID) -> int:
    reply = await c.expect(GetSegmentAttribute(next_id(), segment, attribute, ""), SegmentAttribute)
    return reply.value


async def write(c: WireClient, segment: str, payloads: list[bytes]) -> uuid.UUID:
    """Append ``payloads`` as events with a fresh writer (one AppendBlockEnd); wait for the ack."""
    w = uuid.uuid4()
    assert await c.setup_append(w, segment) == NULL_ATTRIBUTE_VALUE
    c.send(block_end(w, frame_events(payloads), len(payloads), len(payloads), next_id()))
    await c.wait_acked(w, len(payloads))
    return w


# --- handshake and keep-alive ----------------------------------------------------------------


async def test_hello_is_answered_with_17_5(module_server: ServerProcess) -> None:
    c = await WireClient.connect(module_server.host, module_server.port, hello=False)
    async with c:
        c.send(Hello(15, 5))  # what the official Python client sends
        assert await c.wait_for(lambda x: isinstance(x, Hello)) == Hello(17, 5)
        await c.keepalive()  # the connection stays usable
        assert not c.is_closed


async def test_incompatible_hello_gets_hello_then_close(module_server: ServerProcess) -> None:
    for versions in ((30, 18), (4, 1)):  # client too new / too old
        c = await WireClient.connect(module_server.host, module_server.port, hello=False)
        async with c:
            c.send(Hello(*versions))
            await c.wait_closed(5)
            assert c.received == [Hello(17, 5)], versions


async def test_commands_without_hello_are_served(module_server: ServerProcess) -> None:
    c = await WireClient.connect(module_server.host, module_server.port, hello=False)
    async with c:
        name = unique()
        await c.create_segment(name)
        assert (await c.info(name)).write_offset == 0


async def test_keepalive_is_echoed(client: WireClient) -> None:
    for _ in range(3):
        await client.keepalive()
    assert len(client.of_type(KeepAlive)) == 3
    assert client.of_type(Hello) == [Hello(17, 5)]
    assert not client.is_closed


# --- segment management -------------------------------------------------------------------


async def test_get_stream_segment_info(client: WireClient) -> None:
    name = unique()
    before = int(time.time() * 1000)
    await client.create_segment(name)
    await write(client, name, [b"abc", b"defgh"])
    rid = next_id()
    info = await client.expect(GetStreamSegmentInfo(rid, name, ""), StreamSegmentInfo)
    assert info.request_id == rid and info.segment_name == name
    assert (info.exists, info.is_sealed, info.is_deleted) == (True, False, False)
    assert info.write_offset == 8 + 3 + 8 + 5
    assert info.start_offset == 0
    assert before - 5000 <= info.last_modified <= int(time.time() * 1000) + 5000

    missing = unique()
    rid = next_id()
    reply = await client.request(GetStreamSegmentInfo(rid, missing, ""))
    assert reply == NoSuchSegment(rid, missing, "", -1)


async def test_create_segment_and_already_exists(client: WireClient) -> None:
    name = unique()
    rid = next_id()
    assert await client.request(CreateSegment(rid, name, 1000, 1, "", 0)) == SegmentCreated(
        rid, name
    )
    assert await attr(client, name, SCALE_POLICY_TYPE) == 1
    assert await attr(client, name, SCALE_POLICY_RATE) == 1000
    created = await attr(client, name, CREATION_TIME)
    assert abs(created - time.time() * 1000) < 60_000
    rid2 = next_id()
    assert await client.request(CreateSegment(rid2, name, 0, 0, "")) == SegmentAlreadyExists(
        rid2, name, ""
    )
    # The first one was not disturbed.
    assert await attr(client, name, SCALE_POLICY_RATE) == 1000


async def test_update_segment_policy(client: WireClient) -> None:
    name = unique()
    await client.create_segment(name, target_rate=10, scale_type=1)
    rid = next_id()
    reply = await client.request(UpdateSegmentPolicy(rid, name, 77, 2, ""))
    assert reply == SegmentPolicyUpdated(rid, name)
    assert await attr(client, name, SCALE_POLICY_TYPE) == 2
    assert await attr(client, name, SCALE_POLICY_RATE) == 77

    missing = unique()
    rid = next_id()
    reply = await client.request(UpdateSegmentPolicy(rid, missing, 1, 1, ""))
    assert reply == NoSuchSegment(rid, missing, "", -1)

    await client.expect(SealSegment(next_id(), name, ""), SegmentSealed)
    rid = next_id()
    reply = await client.request(UpdateSegmentPolicy(rid, name, 5, 1, ""))
    assert isinstance(reply, SegmentIsSealed) and reply.request_id == rid
    assert reply.segment == name


async def test_create_transient_segment_lives_with_its_connection(
    module_server: ServerProcess, client: WireClient
) -> None:
    parent = unique()
    await client.create_segment(parent)
    owner = await WireClient.connect(module_server.host, module_server.port)
    writer = uuid.UUID("d7eb673e-9085-de6b-1742-1e5a2edaa86f")
    rid = next_id()
    created = await owner.expect(CreateTransientSegment(rid, writer, parent, ""), SegmentCreated)
    assert created.request_id == rid
    pattern = re.escape(parent) + r"#transient\.d7eb673e9085de6b17421e5a2edaa86f\.[0-9a-f]{32}"
    assert re.fullmatch(pattern, created.segment), created.segment
    transient = created.segment
    # Usable: a writer can append to it, and others can see it.
    assert await owner.setup_append(writer, transient) == NULL_ATTRIBUTE_VALUE
    owner.send(ConditionalBlockEnd(writer, 0, 0, b"piece", next_id()))
    await owner.wait_acked(writer, 0)
    assert (await client.info(transient)).write_offset == 5
    # A second one for the same writer gets another name.
    other = await owner.expect(
        CreateTransientSegment(next_id(), writer, parent, ""), SegmentCreated
    )
    assert other.segment != transient

    missing = unique()
    rid = next_id()
    reply = await owner.request(CreateTransientSegment(rid, writer, missing, ""))
    assert reply == NoSuchSegment(rid, missing, "", -1)

    await owner.close()
    deadline = time.monotonic() + 5
    gone: set[str] = set()
    while time.monotonic() < deadline and len(gone) < 2:
        for name in (transient, other.segment):
            reply = await client.request(GetStreamSegmentInfo(next_id(), name, ""))
            if isinstance(reply, NoSuchSegment):
                gone.add(name)
        await asyncio.sleep(0.05)
    assert gone == {transient, other.segment}, "transient segments outlived their connection"
    assert (await client.info(parent)).write_offset == 0


async def test_seal_segment(client: WireClient) -> None:
    name = unique()
    await client.create_segment(name)
    w = await write(client, name, [b"one"])
    rid = next_id()
    assert await client.request(SealSegment(rid, name, "")) == SegmentSealed(rid, name)
    info = await client.info(name)
    assert info.is_sealed and info.write_offset == 11
    rid = next_id()
    reply = await client.request(SealSegment(rid, name, ""))
    assert isinstance(reply, SegmentIsSealed)
    assert (reply.request_id, reply.segment) == (rid, name)

    missing = unique()
    rid = next_id()
    assert await client.request(SealSegment(rid, missing, "")) == NoSuchSegment(
        rid, missing, "", -1
    )

    # SetupAppend still works on a sealed segment and tells the writer what made it in;
    # the next append fails with SegmentIsSealed carrying the failed event number.
    assert await client.setup_append(w, name) == 1
    rid = next_id()
    client.send(block_end(w, frame_event(b"late"), 1, 2, rid))
    reply = await client.reply_to(rid)
    assert reply == SegmentIsSealed(rid, name, "", 2)
    assert (await client.info(name)).write_offset == 11
    assert not client.is_closed


async def test_truncate_segment(client: WireClient) -> None:
    name = unique()
    await client.create_segment(name)
    await write(client, name, [b"x" * 42, b"y" * 42])  # 100 bytes
    rid = next_id()
    assert await client.request(TruncateSegment(rid, name, 50, "")) == SegmentTruncated(rid, name)
    info = await client.info(name)
    assert (info.start_offset, info.write_offset) == (50, 100)

    # Out of range (beyond the end, or below the start): SegmentIsTruncated with the
    # current start offset and the requested offset.
    for bad in (101, 10):
        rid = next_id()
        reply = await client.request(TruncateSegment(rid, name, bad, ""))
        assert reply == SegmentIsTruncated(rid, name, 50, "", bad), bad

    # Reading below the start offset.
    rid = next_id()
    reply = await client.request(ReadSegment(name, 20, 100, "", rid))
    assert reply == SegmentIsTruncated(rid, name, 50, "", 20)
    # Reading from the start offset works.
    reply = await client.read(name, 50)
    assert isinstance(reply, SegmentRead)
    assert reply.offset == 50 and bytes(reply.data) == frame_events([b"x" * 42, b"y" * 42])[50:]

    # Truncating to the end is allowed, and so is truncating a sealed segment.
    await client.expect(SealSegment(next_id(), name, ""), SegmentSealed)
    rid = next_id()
    assert await client.request(TruncateSegment(rid, name, 100, "")) == SegmentTruncated(rid, name)
    assert (await client.info(name)).start_offset == 100

    missing = unique()
    rid = next_id()
    reply = await client.request(TruncateSegment(rid, missing, 0, ""))
    assert isinstance(reply, NoSuchSegment) and (reply.request_id, reply.segment) == (rid, missing)


async def test_delete_segment(client: WireClient) -> None:
    name = unique()
    await client.create_segment(name)
    await write(client, name, [b"gone soon"])
    rid = next_id()
    assert await client.request(DeleteSegment(rid, name, "")) == SegmentDeleted(rid, name)
    rid = next_id()
    assert await client.request(GetStreamSegmentInfo(rid, name, "")) == NoSuchSegment(
        rid, name, "", -1
    )
    rid = next_id()
    assert await client.request(DeleteSegment(rid, name, "")) == NoSuchSegment(rid, name, "", -1)
    # The name can be used again, from scratch.
    await client.create_segment(name)
    assert (await client.info(name)).write_offset == 0


async def test_merge_segments(client: WireClient) -> None:
    target = unique()
    source = target + "#transaction." + uuid.uuid4().hex
    await client.create_segment(target)
    await client.create_segment(source)
    await write(client, target, [b"t1", b"t2"])
    await write(client, source, [b"s1", b"s2", b"s3"])
    assert await attr(client, source, EVENT_COUNT) == 3
    rid = next_id()
    reply = await client.request(MergeSegments(rid, target, source, ""))
    assert reply == SegmentsMerged(rid, target, source, 2 * 10 + 3 * 10)
    assert parse_events(await client.read_all(target)) == [b"t1", b"t2", b"s1", b"s2", b"s3"]
    assert await attr(client, target, EVENT_COUNT) == 5
    reply = await client.request(GetStreamSegmentInfo(next_id(), source, ""))
    assert isinstance(reply, NoSuchSegment)

    # A retry of a merge that is done is answered as a success with the target's length.
    rid = next_id()
    reply = await client.request(MergeSegments(rid, target, source, ""))
    assert reply == SegmentsMerged(rid, target, source, 50)

    # A source that never existed: NoSuchSegment naming the source.
    ghost = target + "#transaction." + uuid.uuid4().hex
    rid = next_id()
    reply = await client.request(MergeSegments(rid, target, ghost, ""))
    assert isinstance(reply, NoSuchSegment) and (reply.request_id, reply.segment) == (rid, ghost)

    # A missing target: the error still names the source.
    other_source = unique()
    await client.create_segment(other_source)
    missing = unique()
    rid = next_id()
    reply = await client.request(MergeSegments(rid, missing, other_source, ""))
    assert isinstance(reply, NoSuchSegment)
    assert (reply.request_id, reply.segment) == (rid, other_source)

    # A sealed target: SegmentIsSealed naming the source; the source keeps its data.
    sealed_target = unique()
    await client.create_segment(sealed_target)
    await client.expect(SealSegment(next_id(), sealed_target, ""), SegmentSealed)
    await write(client, other_source, [b"keep"])
    rid = next_id()
    reply = await client.request(MergeSegments(rid, sealed_target, other_source, ""))
    assert isinstance(reply, SegmentIsSealed)
    assert (reply.request_id, reply.segment) == (rid, other_source)
    assert parse_events(await client.read_all(other_source)) == [b"keep"]


async def test_merge_segments_with_conditional_attribute_updates(client: WireClient) -> None:
    target = unique()
    source = target + "#transaction." + uuid.uuid4().hex
    await client.create_segment(target)
    await client.create_segment(source)
    await write(client, source, [b"payload"])
    key = uuid.uuid4()
    await client.expect(
        UpdateSegmentAttribute(next_id(), target, key, 10, NULL_ATTRIBUTE_VALUE, ""),
        SegmentAttributeUpdated,
    )
    # Wrong expected value: SegmentAttributeUpdated(false) and nothing changes.
    rid = next_id()
    bad = (ConditionalAttributeUpdate(key, REPLACE_IF_EQUALS, 11, 9),)
    reply = await client.request(MergeSegments(rid, target, source, "", bad))
    assert reply == SegmentAttributeUpdated(rid, False)
    assert (await client.info(target)).write_offset == 0
    assert (await client.info(source)).write_offset == 15
    assert await attr(client, target, key) == 10
    # Right expected value: merged, attribute replaced.
    rid = next_id()
    good = (ConditionalAttributeUpdate(key, REPLACE_IF_EQUALS, 11, 10),)
    reply = await client.request(MergeSegments(rid, target, source, "", good))
    assert reply == SegmentsMerged(rid, target, source, 15)
    assert await attr(client, target, key) == 11
    assert parse_events(await client.read_all(target)) == [b"payload"]


async def test_merge_segments_batch(client: WireClient) -> None:
    target = unique()
    sources = [f"{target}#transaction.{uuid.uuid4().hex}" for _ in range(3)]
    await client.create_segment(target)
    await write(client, target, [b"base"])  # 12 bytes
    for i, s in enumerate(sources):
        await client.create_segment(s)
        await write(client, s, [f"src{i}".encode()] * (i + 1))  # 12 bytes per event
    rid = next_id()
    reply = await client.request(MergeSegmentsBatch(rid, target, tuple(sources), ""))
    assert isinstance(reply, SegmentsBatchMerged) and reply.request_id == rid
    assert reply.target == target
    assert [s for s, _ in reply.merged] == sources
    assert [n for _, n in reply.merged] == [24, 48, 84]
    events = parse_events(await client.read_all(target))
    assert events == [b"base", b"src0", b"src1", b"src1", b"src2", b"src2", b"src2"]
    assert await attr(client, target, EVENT_COUNT) == 7
    # Retried: every source is already merged, which counts as success.
    rid = next_id()
    reply = await client.request(MergeSegmentsBatch(rid, target, tuple(sources), ""))
    assert reply == SegmentsBatchMerged(rid, target, tuple((s, 84) for s in sources))
    # A missing target fails the request, naming the target.
    missing = unique()
    lone = f"{missing}#transaction.{uuid.uuid4().hex}"
    await client.create_segment(lone)
    rid = next_id()
    reply = await client.request(MergeSegmentsBatch(rid, missing, (lone,), ""))
    assert isinstance(reply, NoSuchSegment) and (reply.request_id, reply.segment) == (rid, missing)


async def test_locate_offset(client: WireClient) -> None:
    name = unique()
    await client.create_segment(name)
    payloads = [b"a" * 10, b"b" * 20, b"c" * 30]
    await write(client, name, payloads)
    boundaries = [0, 18, 46, 84]
    for target in (0, 1, 18, 30, 84):
        rid = next_id()
        reply = await client.expect(LocateOffset(rid, name, target, ""), OffsetLocated)
        assert (reply.request_id, reply.segment) == (rid, name)
        assert reply.offset in boundaries and reply.offset >= target, (target, reply)
    missing = unique()
    rid = next_id()
    error = await client.request(LocateOffset(rid, missing, 0, ""))
    assert error == NoSuchSegment(rid, missing, "", -1)


async def test_flush_to_storage(client: WireClient) -> None:
    rid = next_id()
    assert await client.request(FlushToStorage(0, "", rid)) == StorageFlushed(rid)


async def test_segment_attributes(client: WireClient) -> None:
    name = unique()
    await client.create_segment(name)
    key = uuid.uuid4()
    assert await attr(client, name, key) == NULL_ATTRIBUTE_VALUE

    async def cas(new: int, expected: int) -> bool:
        rid = next_id()
        reply = await client.expect(
            UpdateSegmentAttribute(rid, name, key, new, expected, ""), SegmentAttributeUpdated
        )
        assert reply.request_id == rid
        return reply.success

    assert await cas(5, NULL_ATTRIBUTE_VALUE)  # "only if absent": it was absent
    assert await attr(client, name, key) == 5
    assert not await cas(6, NULL_ATTRIBUTE_VALUE)  # now it is set
    assert not await cas(6, 4)  # wrong expected value
    assert await attr(client, name, key) == 5
    assert await cas(-7, 5)
    assert await attr(client, name, key) == -7
    assert await cas(NULL_ATTRIBUTE_VALUE, -7)  # NULL new value removes it
    assert await attr(client, name, key) == NULL_ATTRIBUTE_VALUE
    assert await cas(1, NULL_ATTRIBUTE_VALUE)  # absent again
    # EVENT_COUNT is kept by appends.
    await write(client, name, [b"e"] * 4)
    assert await attr(client, name, EVENT_COUNT) == 4

    missing = unique()
    rid = next_id()
    reply = await client.request(GetSegmentAttribute(rid, missing, key, ""))
    assert reply == NoSuchSegment(rid, missing, "", -1)
    rid = next_id()
    reply = await client.request(UpdateSegmentAttribute(rid, missing, key, 1, 1, ""))
    assert reply == NoSuchSegment(rid, missing, "", -1)

    await client.expect(SealSegment(next_id(), name, ""), SegmentSealed)
    rid = next_id()
    reply = await client.request(UpdateSegmentAttribute(rid, name, key, 2, 1, ""))
    assert isinstance(reply, SegmentIsSealed) and reply.request_id == rid
    assert await attr(client, name, key) == 1  # still readable on a sealed segment


# --- the append path ------------------------------------------------------------------------


async def test_setup_append(module_server: ServerProcess, client: WireClient) -> None:
    name = unique()
    await client.create_segment(name)
    w = uuid.uuid4()
    rid = next_id()
    reply = await client.request(SetupAppend(rid, w, name, ""))
    assert reply == AppendSetup(rid, name, w, NULL_ATTRIBUTE_VALUE)
    client.send(block_end(w, frame_events([b"a", b"b", b"c"]), 3, 7, next_id()))
    await client.wait_acked(w, 7)
    # Another connection (a reconnect) learns the writer's last event number.
    async with await WireClient.connect(module_server.host, module_server.port) as c2:
        assert await c2.setup_append(w, name) == 7
        assert await c2.setup_append(uuid.uuid4(), name) == NULL_ATTRIBUTE_VALUE
    missing = unique()
    rid = next_id()
    reply = await client.request(SetupAppend(rid, w, missing, ""))
    assert reply == NoSuchSegment(rid, missing, "", -1)
    assert not client.is_closed


async def test_append_block_end_alone(client: WireClient) -> None:
    name = unique()
    await client.create_segment(name)
    w = uuid.uuid4()
    await client.setup_append(w, name)
    # Exactly the golden example 14.4 (Rust writer style), then two more.
    rid = next_id()
    two = frame_events([b"hello", b"world!"])
    client.send(AppendBlockEnd(w, 27, two, 2, 2, rid))
    ack = await client.wait_acked(w, 2)
    assert ack == DataAppended(w, 2, NULL_ATTRIBUTE_VALUE, rid, 27)
    rid2, rid3 = next_id(), next_id()
    client.send(block_end(w, frame_event(b"x"), 1, 3, rid2))
    client.send(block_end(w, frame_events([b"y", b"z"]), 2, 5, rid3))
    await client.wait_acked(w, 5)
    assert client.acks(w) == [
        DataAppended(w, 2, NULL_ATTRIBUTE_VALUE, rid, 27),
        DataAppended(w, 3, 2, rid2, 36),
        DataAppended(w, 5, 3, rid3, 54),
    ]
    assert parse_events(await client.read_all(name)) == [b"hello", b"world!", b"x", b"y", b"z"]
    assert await attr(client, name, EVENT_COUNT) == 5


async def test_append_blocks_java_shapes(client: WireClient) -> None:
    """AppendBlock + AppendBlockEnd as the Java writer builds them: whole records, a record
    split by a PartialEvent (even inside its header), and blocks closed with Padding."""
    name = unique()
    await client.create_segment(name)
    w = uuid.uuid4()
    setup_rid = next_id()
    client.send(SetupAppend(setup_rid, w, name, ""))
    await client.reply_to(setup_rid)
    payloads = [bytes([i % 251]) * (i * 37 % 300) for i in range(1, 120)]
    records = [frame_event(p) for p in payloads]
    expected_data = b"".join(records)
    sent = 0
    total_blocks = 0
    for block_size, chunk in ((100, records[:40]), (13, records[40:45]), (4096, records[45:])):
        frames = build_blocks(w, chunk, sent + 1, setup_rid, block_size)
        client.send(*frames)
        sent += len(chunk)
        total_blocks += len(frames) // 2
    await client.wait_acked(w, sent, timeout=20)
    acks = client.acks(w)
    # One ack per block, in order, each carrying the setup request id and a growing offset.
    assert len(acks) == total_blocks
    assert all(a.request_id == setup_rid for a in acks)
    assert [a.previous_event_number for a in acks[1:]] == [a.event_number for a in acks[:-1]]
    assert acks[0].previous_event_number == NULL_ATTRIBUTE_VALUE
    offsets = [a.current_segment_write_offset for a in acks]
    assert offsets == sorted(offsets) and offsets[-1] == len(expected_data)
    data = await client.read_all(name)
    assert data == expected_data
    assert parse_events(data) == payloads
    assert await attr(client, name, EVENT_COUNT) == len(payloads)


async def test_build_blocks_exercises_partial_event_and_padding() -> None:
    """Guard for the test above: the block shapes really contain both sub-frames."""
    w = uuid.uuid4()
    records = [frame_event(b"z" * n) for n in (5, 50, 7, 70, 1)]
    frames = build_blocks(w, records, 1, 1, 40)
    blocks = [f for f in frames if isinstance(f, AppendBlock)]
    ends = [f for f in frames if isinstance(f, AppendBlockEnd)]
    sub_types = {
        int.from_bytes(
            b.data[e.size_of_whole_events : e.size_of_whole_events + 4], "big", signed=True
        )
        for b, e in zip(blocks, ends, strict=True)
    }
    assert sub_types == {-2, -1}


async def test_padding_at_top_level_is_ignored(client: WireClient) -> None:
    name = unique()
    await client.create_segment(name)
    w = uuid.uuid4()
    await client.setup_append(w, name)
    client.send(Padding(0), Padding(37))
    client.send(block_end(w, frame_event(b"after padding"), 1, 1, next_id()))
    client.send(Padding(5))
    await client.wait_acked(w, 1)
    await client.keepalive()
    assert parse_events(await client.read_all(name)) == [b"after padding"]


async def test_conditional_append(client: WireClient) -> None:
    name = unique()
    await client.create_segment(name)
    w = uuid.uuid4()
    await client.setup_append(w, name)
    rid = next_id()
    client.send(ConditionalAppend(w, 1, 0, b"first", rid))
    assert await client.wait_acked(w, 1) == DataAppended(w, 1, NULL_ATTRIBUTE_VALUE, rid, 13)
    # Wrong expected offset: ConditionalCheckFailed; writer and connection stay usable.
    rid = next_id()
    client.send(ConditionalAppend(w, 2, 0, b"stale", rid))
    assert await client.reply_to(rid) == ConditionalCheckFailed(w, 2, rid)
    rid = next_id()
    client.send(ConditionalAppend(w, 3, 13, b"second", rid))
    assert await client.wait_acked(w, 3) == DataAppended(w, 3, 1, rid, 27)
    assert parse_events(await client.read_all(name)) == [b"first", b"second"]
    assert await attr(client, name, EVENT_COUNT) == 2


async def test_conditional_block_end(client: WireClient) -> None:
    """Byte-stream style: raw bytes, expected offset = the writer's running offset."""
    name = unique()
    await client.create_segment(name)
    w = uuid.uuid4()
    await client.setup_append(w, name)
    r1, r2 = next_id(), next_id()
    # Pipelined: the second expects the length after the first.
    client.send(ConditionalBlockEnd(w, 1, 0, b"hello bytes", r1))
    client.send(ConditionalBlockEnd(w, 2, 11, b"-more", r2))
    await client.wait_acked(w, 2)
    assert client.acks(w) == [
        DataAppended(w, 1, NULL_ATTRIBUTE_VALUE, r1, 11),
        DataAppended(w, 2, 1, r2, 16),
    ]
    # A second writer that believes the stream is empty fails the check.
    w2 = uuid.uuid4()
    await client.setup_append(w2, name)
    rid = next_id()
    client.send(ConditionalBlockEnd(w2, 1, 0, b"conflict", rid))
    assert await client.reply_to(rid) == ConditionalCheckFailed(w2, 1, rid)
    rid = next_id()
    client.send(ConditionalBlockEnd(w2, 2, 16, b"!", rid))
    assert await client.wait_acked(w2, 2) == DataAppended(w2, 2, NULL_ATTRIBUTE_VALUE, rid, 17)
    assert await client.read_all(name) == b"hello bytes-more!"


async def test_append_to_missing_or_deleted_segment(client: WireClient) -> None:
    name = unique()
    await client.create_segment(name)
    w = uuid.uuid4()
    await client.setup_append(w, name)
    await client.expect(DeleteSegment(next_id(), name, ""), SegmentDeleted)
    rid = next_id()
    client.send(block_end(w, frame_event(b"x"), 1, 1, rid))
    assert await client.reply_to(rid) == NoSuchSegment(rid, name, "", -1)
    assert not client.is_closed
    await client.keepalive()


# --- the read path ---------------------------------------------------------------------------


async def test_read_segment(client: WireClient) -> None:
    name = unique()
    await client.create_segment(name)
    payloads = [b"p" * 100, b"q" * 200]
    await write(client, name, payloads)
    rid = next_id()
    reply = await client.request(ReadSegment(name, 0, 1 << 20, "", rid))
    assert reply == SegmentRead(name, 0, True, False, frame_events(payloads), rid)
    # A read that stops before the end: neither flag.
    rid = next_id()
    reply = await client.request(ReadSegment(name, 10, 50, "", rid))
    assert reply == SegmentRead(name, 10, False, False, frame_events(payloads)[10:60], rid)
    # The server reads at least 8 bytes whatever the suggested length (reference 8.1).
    reply = await client.request(ReadSegment(name, 0, 1, "", next_id()))
    assert isinstance(reply, SegmentRead) and len(reply.data) == 8

    # Sealed: endOfSegment when the data reaches the end, then an empty end-of-segment read.
    await client.expect(SealSegment(next_id(), name, ""), SegmentSealed)
    rid = next_id()
    reply = await client.request(ReadSegment(name, 108, 1 << 20, "", rid))
    assert reply == SegmentRead(name, 108, False, True, frame_event(b"q" * 200), rid)
    rid = next_id()
    reply = await client.request(ReadSegment(name, 316, 1000, "", rid))
    assert reply == SegmentRead(name, 316, False, True, b"", rid)

    missing = unique()
    rid = next_id()
    reply = await client.request(ReadSegment(missing, 123, 1000, "", rid))
    assert reply == NoSuchSegment(rid, missing, "", 123)


async def test_read_is_capped_at_2_mib(client: WireClient) -> None:
    name = unique()
    await client.create_segment(name)
    w = uuid.uuid4()
    await client.setup_append(w, name)
    big = frame_events([b"m" * (1 << 20)] * 3)
    client.send(block_end(w, big, 3, 3, next_id()))
    await client.wait_acked(w, 3, timeout=20)
    reply = await client.request(ReadSegment(name, 0, 16 << 20, "", next_id()))
    assert isinstance(reply, SegmentRead)
    assert 0 < len(reply.data) <= 2 << 20
    assert bytes(reply.data) == big[: len(reply.data)]
    assert not reply.at_tail
    assert await client.read_all(name) == big


async def test_pipelined_requests_of_mixed_kinds(client: WireClient) -> None:
    """Many requests sent at once are all answered, each with its own request id."""
    name = unique()
    await client.create_segment(name)
    await write(client, name, [b"z" * 10])
    cmds: list[GetStreamSegmentInfo | ReadSegment | GetSegmentAttribute] = []
    for _ in range(50):
        cmds.append(GetStreamSegmentInfo(next_id(), name, ""))
        cmds.append(ReadSegment(name, 0, 100, "", next_id()))
        cmds.append(GetSegmentAttribute(next_id(), name, EVENT_COUNT, ""))
    client.send(*cmds)
    ids = {c.request_id for c in cmds}
    await client.wait_until(lambda: all(client.by_id(i) for i in ids), timeout=20)
    for cmd in cmds:
        replies = client.by_id(cmd.request_id)
        assert len(replies) == 1, replies
        reply = replies[0]
        want = {
            GetStreamSegmentInfo: StreamSegmentInfo,
            ReadSegment: SegmentRead,
            GetSegmentAttribute: SegmentAttribute,
        }[type(cmd)]
        assert isinstance(reply, want), (cmd, reply)


# --- races and framing ------------------------------------------------------------------------


async def test_concurrent_compare_and_set_has_one_winner_per_value(
    module_server: ServerProcess,
) -> None:
    name = unique()
    key = uuid.uuid4()
    host, port = module_server.host, module_server.port
    clients = [await WireClient.connect(host, port) for _ in range(5)]
    try:
        await clients[0].create_segment(name)
        wins = 0
        for value in range(20):
            expected = NULL_ATTRIBUTE_VALUE if value == 0 else value - 1
            rids = [next_id() for _ in clients]
            for c, r in zip(clients, rids, strict=True):
                c.send(UpdateSegmentAttribute(r, name, key, value, expected, ""))
            replies = [await c.reply_to(r) for c, r in zip(clients, rids, strict=True)]
            assert all(isinstance(x, SegmentAttributeUpdated) for x in replies)
            round_wins = sum(
                1 for x in replies if isinstance(x, SegmentAttributeUpdated) and x.success
            )
            assert round_wins == 1, replies
            wins += round_wins
        assert await attr(clients[0], name, key) == 19
        assert wins == 20
    finally:
        for c in clients:
            await c.close()


async def test_racing_conditional_appends_have_one_winner(module_server: ServerProcess) -> None:
    name = unique()
    host, port = module_server.host, module_server.port
    clients = [await WireClient.connect(host, port) for _ in range(4)]
    try:
        await clients[0].create_segment(name)
        writers = [uuid.uuid4() for _ in clients]
        for c, w in zip(clients, writers, strict=True):
            await c.setup_append(w, name)
        length = 0
        for n in range(1, 11):
            rids = [next_id() for _ in clients]
            for i, (c, w, r) in enumerate(zip(clients, writers, rids, strict=True)):
                c.send(ConditionalAppend(w, n, length, f"{i}:{n}".encode(), r))
            replies = [
                await c.wait_for(functools.partial(has_request_id, r))
                for c, r in zip(clients, rids, strict=True)
            ]
            winners = [x for x in replies if isinstance(x, DataAppended)]
            assert len(winners) == 1, replies
            assert all(isinstance(x, DataAppended | ConditionalCheckFailed) for x in replies), (
                replies
            )
            length = winners[0].current_segment_write_offset
        events = parse_events(await clients[0].read_all(name))
        assert len(events) == 10
        assert [int(e.split(b":")[1]) for e in events] == list(range(1, 11))
    finally:
        for c in clients:
            await c.close()


async def test_frames_trickled_byte_by_byte(module_server: ServerProcess) -> None:
    """The server reassembles frames however TCP cuts them (here: one byte per write)."""
    c = await WireClient.connect(module_server.host, module_server.port, hello=False)

    async def trickle(*cmds: Command) -> None:
        stream = b"".join(encode(x) for x in cmds)
        for i in range(len(stream)):
            c.send_raw(stream[i : i + 1])
            await c.drain()
            await asyncio.sleep(0)

    async with c:
        name = unique()
        w = uuid.uuid4()
        create_rid, setup_rid, append_rid, info_rid = next_id(), next_id(), next_id(), next_id()
        await trickle(Hello(17, 5), CreateSegment(create_rid, name))
        assert await c.reply_to(create_rid) == SegmentCreated(create_rid, name)
        await trickle(SetupAppend(setup_rid, w, name, ""))
        await c.reply_to(setup_rid)
        records = [frame_event(b"a" * 40), frame_event(b"b" * 5)]
        blocks = build_blocks(w, records, 1, append_rid, 30)
        await trickle(*blocks, GetStreamSegmentInfo(info_rid, name, ""))
        info = await c.reply_to(info_rid)
        await c.wait_acked(w, 2)
        assert isinstance(info, StreamSegmentInfo)
        assert parse_events(await c.read_all(name)) == [b"a" * 40, b"b" * 5]
