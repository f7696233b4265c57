"""The async client against a real server process: admin, writers, readers, tables."""

from __future__ import annotations

import asyncio
import struct
import time
import uuid

import pytest
import segmentstore_client as sc
from segmentstore_client import records

N = 100_000


def payload(i: int, size: int = 100) -> bytes:
    return b"%010d" % i + b"." * (size - 10)


# -- admin ---------------------------------------------------------------------------


async def test_admin_segment_lifecycle(client: sc.Client, segment: str) -> None:
    assert await client.create_segment(segment) is True
    assert await client.create_segment(segment, exist_ok=True) is False
    with pytest.raises(sc.SegmentAlreadyExists):
        await client.create_segment(segment)
    info = await client.segment_info(segment)
    assert (info.name, info.length, info.start_offset, info.sealed) == (segment, 0, 0, False)
    assert info.last_modified > 0
    async with client.writer(segment) as w:
        await w.write_many([b"a" * 10, b"b" * 20])
    assert (await client.segment_info(segment)).length == 18 + 28
    assert await client.event_count(segment) == 2
    await client.truncate(segment, 18)
    assert (await client.segment_info(segment)).start_offset == 18
    with pytest.raises(sc.SegmentTruncated):
        await client.truncate(segment, 10_000)
    await client.seal(segment)
    await client.seal(segment)  # sealing twice is fine
    assert (await client.segment_info(segment)).sealed
    assert await client.delete(segment) is True
    assert await client.delete(segment, missing_ok=True) is False
    with pytest.raises(sc.NoSuchSegment):
        await client.delete(segment)
    with pytest.raises(sc.NoSuchSegment):
        await client.segment_info(segment)


async def test_attributes_and_merge(client: sc.Client, segment: str) -> None:
    source = segment + "#transaction.00000000000000000000000000000001"
    await client.create_segment(segment)
    await client.create_segment(source)
    attr = uuid.uuid4()
    assert await client.get_attribute(segment, attr) is None
    assert await client.compare_and_set_attribute(segment, attr, 5, None) is True
    assert await client.compare_and_set_attribute(segment, attr, 6, None) is False
    assert await client.compare_and_set_attribute(segment, attr, 7, 5) is True
    assert await client.get_attribute(segment, attr) == 7
    assert await client.compare_and_set_attribute(segment, "named", 1, None) is True
    assert await client.get_attribute(segment, "named") == 1
    async with client.writer(segment) as w:
        await w.write(b"target")
    async with client.writer(source) as w:
        await w.write_many([b"s1", b"s2"])
    length = await client.merge(segment, source)
    assert length in (-1, 14 + 10 + 10)
    assert [e.data async for e in client.reader(segment)] == [b"target", b"s1", b"s2"]
    with pytest.raises(sc.NoSuchSegment):
        await client.segment_info(source)


async def test_connect_failure_is_reported() -> None:
    with pytest.raises(sc.ConnectFailed) as info:
        await sc.connect("tcp://127.0.0.1:1", reconnect_timeout=0.3, connect_timeout=0.2)
    assert info.value.retriable


# -- writing and reading ---------------------------------------------------------------


async def test_write_and_read_100k_events(client: sc.Client, segment: str) -> None:
    await client.create_segment(segment)
    async with client.writer(segment) as w:
        acks = [await w.write(payload(i)) for i in range(N)]
    assert all(a.done() and a.exception() is None for a in acks[:: N // 100])
    assert w.acked_event_number == N
    assert await client.event_count(segment) == N
    i = 0
    offset = 0
    reader = client.reader(segment)
    async for event in reader:
        assert event.data == payload(i)
        assert event.offset == offset
        offset = event.next_offset
        i += 1
    assert i == N
    assert reader.position == sc.Position(segment, offset)
    assert offset == (await client.segment_info(segment)).length


async def test_write_many_and_read_batches(client: sc.Client, segment: str) -> None:
    await client.create_segment(segment)
    async with client.writer(segment) as w:
        ack = await w.write_many(payload(i, 50) for i in range(N))
        await ack
        assert ack.done()
    n = 0
    async for batch in client.reader(segment).batches():
        for e in batch:
            assert e.data == payload(n, 50)
            n += 1
    assert n == N


async def test_single_write_acks_quickly(client: sc.Client, segment: str) -> None:
    await client.create_segment(segment)
    async with client.writer(segment) as w:
        await w.start()
        for i in range(20):
            t = time.perf_counter()
            await (await w.write(b"e%d" % i))
            assert time.perf_counter() - t < 1.0
    assert await client.event_count(segment) == 20


async def test_large_events_straddle_reads(client: sc.Client, segment: str) -> None:
    await client.create_segment(segment)
    sizes = [3 * 1024 * 1024, 1, 700_000, 0, 5_000_000, 64 * 1024]
    blobs = [bytes([i + 1]) * s for i, s in enumerate(sizes)]
    async with client.writer(segment, block_size=256 * 1024) as w:
        for b in blobs:
            await w.write(b)
    got = [e.data async for e in client.reader(segment, read_size=64 * 1024)]
    assert got == blobs
    with pytest.raises(sc.EventTooLarge):
        async with client.writer(segment) as w:
            await w.write(b"x" * (8 * 1024 * 1024 + 1))


async def test_reader_resumes_from_a_saved_position(client: sc.Client, segment: str) -> None:
    await client.create_segment(segment)
    async with client.writer(segment) as w:
        await w.write_many(payload(i) for i in range(1000))
    reader = client.reader(segment)
    seen = []
    async for e in reader:
        seen.append(e.data)
        if len(seen) == 400:
            break
    saved = reader.position.to_json()
    await reader.close()
    rest = [e.data async for e in client.reader(segment, sc.Position.from_json(saved))]
    assert seen + rest == [payload(i) for i in range(1000)]


async def test_non_following_reader_stops_at_the_end(client: sc.Client, segment: str) -> None:
    await client.create_segment(segment)
    assert [e async for e in client.reader(segment)] == []
    async with client.writer(segment) as w:
        await w.write(b"one")
    assert [e.data async for e in client.reader(segment)] == [b"one"]
    with pytest.raises(sc.NoSuchSegment):
        async for _ in client.reader(segment + "-missing"):
            pass


async def test_tail_reader_sees_later_events_and_stops_at_seal(
    client: sc.Client, segment: str
) -> None:
    await client.create_segment(segment)
    got: list[tuple[bytes, float]] = []

    async def consume() -> None:
        async for e in client.reader(segment, follow=True):
            got.append((e.data, time.perf_counter()))

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.3)  # the reader is parked at the tail now
    async with client.writer(segment) as w:
        for i in range(5):
            sent = time.perf_counter()
            await (await w.write(b"tail-%d" % i))
            for _ in range(200):
                if len(got) > i:
                    break
                await asyncio.sleep(0.005)
            assert len(got) == i + 1, "the tail reader did not wake up"
            assert got[i][1] - sent < 1.0
        await w.write_many([b"burst"] * 1000)
    await client.seal(segment)
    await asyncio.wait_for(task, 10)  # sealing ends the iteration
    assert [d for d, _ in got[:5]] == [b"tail-%d" % i for i in range(5)]
    assert len(got) == 1005


async def test_truncation_is_reported_clearly(client: sc.Client, segment: str) -> None:
    await client.create_segment(segment)
    async with client.writer(segment) as w:
        await w.write_many(payload(i) for i in range(100))
    cut = 50 * 108
    await client.truncate(segment, cut)
    reader = client.reader(segment, 0)
    with pytest.raises(sc.SegmentTruncated) as info:
        await reader.__anext__()
    assert info.value.start_offset == cut and not info.value.retriable
    reader.seek(info.value.start_offset)
    assert [e.data async for e in reader] == [payload(i) for i in range(50, 100)]


async def test_read_bytes(client: sc.Client, segment: str) -> None:
    await client.create_segment(segment)
    events = [b"a" * 10, b"b" * 20, b"c" * 30]
    async with client.writer(segment) as w:
        await w.write_many(events)
    records = b"".join(struct.pack(">ii", 0, len(e)) + e for e in events)
    length = len(records)
    chunk = await client.read_bytes(segment, 0, 8)
    assert chunk == sc.ReadChunk(0, struct.pack(">ii", 0, 10), False, False)
    assert chunk.next_offset == 8
    assert (await client.read_bytes(segment, 5, 3)).data == records[5:8]  # not a boundary
    whole = await client.read_bytes(segment, 5, 1 << 20)
    assert (whole.data, whole.at_tail, whole.end_of_segment) == (records[5:], True, False)
    assert whole.next_offset == length
    with pytest.raises(ValueError):
        await client.read_bytes(segment, -1, 8)
    with pytest.raises(ValueError):
        await client.read_bytes(segment, 0, 0)
    with pytest.raises(sc.NoSuchSegment):
        await client.read_bytes(segment + "-missing", 0, 8)
    await client.truncate(segment, 18)
    with pytest.raises(sc.SegmentTruncated) as info:
        await client.read_bytes(segment, 0, 8)
    assert info.value.start_offset == 18 and not info.value.retriable
    assert (await client.read_bytes(segment, 18, 8)).data == records[18:26]
    await client.seal(segment)
    end = await client.read_bytes(segment, length, 8)
    assert end == sc.ReadChunk(length, b"", False, True)


async def test_conditional_appends(client: sc.Client, segment: str) -> None:
    await client.create_segment(segment)
    async with client.writer(segment) as w:
        await (await w.write(b"first", expected_offset=0))
        with pytest.raises(sc.ConditionalCheckFailed):
            await (await w.write(b"stale", expected_offset=0))
        await (await w.write(b"second", expected_offset=13))
        await w.write(b"plain")
        ack = await w.write(b"bad", expected_offset=1)
        await w.write(b"after")
        with pytest.raises(sc.ConditionalCheckFailed):
            await ack
    assert [e.data async for e in client.reader(segment)] == [
        b"first",
        b"second",
        b"plain",
        b"after",
    ]


async def test_sealed_segment_fails_the_writer(client: sc.Client, segment: str) -> None:
    await client.create_segment(segment)
    w = await client.writer(segment).start()
    await (await w.write(b"before"))
    await client.seal(segment)
    ack = await w.write(b"after")
    with pytest.raises(sc.SegmentSealed) as info:
        await ack
    assert info.value.event_number == 2
    with pytest.raises(sc.SegmentSealed):
        await w.write(b"more")
    with pytest.raises(sc.SegmentSealed):
        await w.close()
    with pytest.raises(sc.NoSuchSegment):
        await client.writer(segment + "-missing").start()


async def test_writer_resumes_without_duplicates(client: sc.Client, segment: str) -> None:
    await client.create_segment(segment)
    events = [payload(i) for i in range(1, 3001)]
    async with client.writer(segment, writer_id="resumer") as w:
        await w.write_many(events[:1700])
    assert await client.last_event_number(segment, "resumer") == 1700
    # A new process replays everything with the same numbers: only 1701.. are sent.
    async with client.writer(segment, writer_id="resumer", first_event_number=1) as w:
        for e in events[:1000]:
            assert (await w.write(e)).done()  # acknowledged locally
        await w.write_many(events[1000:])
    # Explicit numbers: again nothing is written twice.
    async with client.writer(segment, writer_id="resumer") as w:
        await w.start()
        assert w.last_event_number == 3000
        assert (await w.write(events[-1], event_number=3000)).done()
        assert (await w.write(b"old", event_number=10)).done()  # durable long ago
        await w.write(b"tail", event_number=5000)
        with pytest.raises(ValueError, match="must increase"):
            await w.write(b"x", event_number=4000)
        await w.write(b"tail2")
    got = [e.data async for e in client.reader(segment)]
    assert got == [*events, b"tail", b"tail2"]
    assert await client.last_event_number(segment, "resumer") == 5001
    # write_many with explicit first numbers, partly already stored.
    async with client.writer(segment, writer_id="resumer") as w:
        await w.write_many([b"old", b"new1", b"new2"], first_event_number=5001)
    assert [e.data async for e in client.reader(segment)][-3:] == [b"tail2", b"new1", b"new2"]


async def test_writer_holds_a_bounded_number_of_bytes(client: sc.Client, segment: str) -> None:
    await client.create_segment(segment)
    bound = 256 * 1024
    async with client.writer(segment, block_size=64 * 1024, max_buffered_bytes=bound) as w:
        peak = 0
        for i in range(20_000):
            await w.write(payload(i, 200))
            peak = max(peak, w.buffered_bytes)
        assert peak <= bound + 208
    assert await client.event_count(segment) == 20_000


async def test_client_close_flushes_its_writers(module_server: object, segment: str) -> None:
    endpoint = module_server.endpoint  # type: ignore[attr-defined]
    c = await sc.connect(endpoint)
    await c.create_segment(segment)
    w = c.writer(segment)
    await w.write_many([b"x"] * 1000)
    await c.close()
    async with sc.connect(endpoint) as c2:
        assert await c2.event_count(segment) == 1000
    with pytest.raises(sc.ClientClosed):
        c.writer(segment)


async def test_records_through_a_segment(client: sc.Client, segment: str) -> None:
    await client.create_segment(segment)
    recs = [
        records.Record(b"v%d" % i * 40, key=b"k%d" % i, timestamp_ns=i, codec=codec)
        for i, codec in enumerate(["none", "gzip", "lz4", "zstd"] * 25)
    ]
    async with client.writer(segment) as w:
        await w.write_many(records.encode_batch(recs))
    got = records.decode_batch([e.data async for e in client.reader(segment)])
    assert got == recs


# -- tables ----------------------------------------------------------------------------


async def test_tables(client: sc.Client) -> None:
    name = f"sdk/_tables/t{uuid.uuid4().hex[:10]}"
    table = client.table(name)
    assert await table.create() is True
    assert await table.create(exist_ok=True) is False
    assert await table.get("missing") is None
    v1 = await table.put("color", "blue", must_not_exist=True)
    with pytest.raises(sc.TableKeyBadVersion):
        await table.put("color", "red", must_not_exist=True)
    entry = await table.get("color")
    assert entry == sc.TableEntry(b"color", b"blue", v1)
    v2 = await table.put("color", "green", version=v1)
    assert v2 != v1
    with pytest.raises(sc.TableConditionFailed):
        await table.put("color", "stale", version=v1)
    with pytest.raises(sc.TableKeyDoesNotExist):
        await table.put("nope", "x", version=v1)
    # All or nothing: one failing condition keeps the whole batch out.
    with pytest.raises(sc.TableConditionFailed):
        await table.put_many([("a", "1"), ("b", "2"), ("color", "x", v1)])
    assert await table.get_many(["a", "b"]) == [None, None]
    versions = await table.put_many([("a", "1"), ("b", "2"), ("color", "y", v2)])
    assert len(versions) == 3
    assert (await table.get("color")) == sc.TableEntry(b"color", b"y", versions[2])
    for i in range(300):
        await table.put(b"k%03d" % i, b"v%d" % i)
    keys = {k.key async for k in table.keys(batch_size=50)}
    assert keys == {b"a", b"b", b"color"} | {b"k%03d" % i for i in range(300)}
    items = {e.key: e.value async for e in table.items(batch_size=64)}
    assert items[b"k007"] == b"v7" and len(items) == 303
    page = await table.changes(0)
    seen = {e.key: e.value for e in page.entries}
    pos = page.position
    while not page.at_end:
        page = await table.changes(pos)
        seen.update({e.key: e.value for e in page.entries})
        pos = page.position
    assert seen[b"color"] == b"y"
    await table.put("late", "1")
    later = await table.changes(pos)
    assert [e.key for e in later.entries] == [b"late"]
    await table.remove("a")
    await table.remove("never-there")
    with pytest.raises(sc.TableConditionFailed):
        await table.remove("b", version=v1)
    await table.remove_many(["b", ("color", versions[2])])
    assert await table.get_many(["a", "b", "color"]) == [None, None, None]
    info = await table.info()
    assert info.entry_count == 301
    with pytest.raises(sc.TableNotEmpty):
        await table.delete(must_be_empty=True)
    assert await table.delete() is True
    assert await table.delete(missing_ok=True) is False


# -- connections -----------------------------------------------------------------------


async def test_keepalive_keeps_an_idle_connection(module_server: object, segment: str) -> None:
    endpoint = module_server.endpoint  # type: ignore[attr-defined]
    async with sc.connect(endpoint, keepalive_interval=0.1, pool_size=1) as c:
        await c.create_segment(segment)
        conn = await c._pool.acquire()
        rx = conn._rx_count
        await asyncio.sleep(0.8)  # idle: KeepAlives go out and come back
        assert conn.is_open and conn._rx_count > rx
        assert await c._pool.acquire() is conn
        assert (await c.segment_info(segment)).length == 0


async def test_many_writers_share_a_client(client: sc.Client, segment: str) -> None:
    segments = [f"{segment}-{i}" for i in range(8)]
    for s in segments:
        await client.create_segment(s)

    async def fill(s: str) -> None:
        async with client.writer(s) as w:
            await w.write_many(payload(i) for i in range(5000))

    await asyncio.gather(*(fill(s) for s in segments))
    for s in segments:
        assert await client.event_count(s) == 5000


async def test_writer_gives_up_when_the_server_stays_away(
    server_factory: object, segment: str
) -> None:
    srv = server_factory()  # type: ignore[operator]
    srv.start()
    async with sc.connect(srv.endpoint, reconnect_timeout=1.0) as c:
        await c.create_segment(segment)
        w = await c.writer(segment).start()
        await (await w.write(b"durable"))
        srv.kill()
        ack = await w.write(b"lost")
        with pytest.raises(sc.ConnectionLost) as info:
            await asyncio.wait_for(ack, 10)
        assert info.value.retriable
        with pytest.raises(sc.ConnectionLost):
            await w.write(b"more")


async def test_pool_serves_from_healthy_connections_and_reopens(module_server: object) -> None:
    endpoint = module_server.endpoint  # type: ignore[attr-defined]
    async with sc.connect(endpoint, pool_size=2) as c:
        a = await c._pool.acquire()
        b = await c._pool.acquire()
        assert a is not b and a.is_open and b.is_open
        a.close()
        got = {await c._pool.acquire() for _ in range(4)}
        assert got == {b}  # never the broken one, never a wait
        for _ in range(100):
            slots = c._pool._slots
            if all(s is not None and s.is_open for s in slots):
                break
            await asyncio.sleep(0.02)
        assert all(s is not None and s.is_open and s is not a for s in c._pool._slots)
