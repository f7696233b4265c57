"""Every SegmentStore operation and every error it can report, on one live store."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from segmentstore.storage import (
    ATTRIBUTE_SEGMENT_TYPE,
    EVENT_COUNT,
    NULL_ATTRIBUTE_VALUE,
    SEGMENT_TYPE_TABLE,
    SEGMENT_TYPE_TRANSIENT,
    AppendResult,
    AppendTooLarge,
    AttributeUpdate,
    AttributeUpdateType,
    BadAttributeUpdate,
    BadOffset,
    InvalidOffset,
    SegmentExists,
    SegmentNotFound,
    SegmentSealed,
    SegmentStore,
    SegmentTruncated,
    StorageError,
    StoreConfig,
)

from .conftest import small_config

NAME = "scope/stream/0.#epoch.0"


async def test_create_exists_info(store: SegmentStore) -> None:
    assert not store.exists(NAME)
    attr = uuid.uuid4()
    await store.create_segment(NAME, segment_type=SEGMENT_TYPE_TABLE, attributes={attr: 7})
    assert store.exists(NAME)
    info = store.info(NAME)
    assert (info.name, info.length, info.start_offset, info.sealed) == (NAME, 0, 0, False)
    assert info.segment_type == SEGMENT_TYPE_TABLE
    assert info.attributes == {attr: 7}
    assert info.last_modified_ms > 0
    assert store.segment_names() == [NAME]
    assert store.get_attribute(NAME, ATTRIBUTE_SEGMENT_TYPE) == SEGMENT_TYPE_TABLE
    with pytest.raises(SegmentExists):
        await store.create_segment(NAME)


async def test_missing_segment_everywhere(store: SegmentStore) -> None:
    with pytest.raises(SegmentNotFound):
        store.info("nope")
    with pytest.raises(SegmentNotFound):
        await store.append("nope", b"x")
    with pytest.raises(SegmentNotFound):
        await store.read("nope", 0, 10)
    with pytest.raises(SegmentNotFound):
        store.try_read("nope", 0, 10)
    with pytest.raises(SegmentNotFound):
        await store.seal("nope")
    with pytest.raises(SegmentNotFound):
        await store.truncate("nope", 0)
    with pytest.raises(SegmentNotFound):
        await store.delete("nope")
    with pytest.raises(SegmentNotFound):
        store.get_attribute("nope", EVENT_COUNT)
    with pytest.raises(SegmentNotFound):
        await store.update_attributes(
            "nope", [AttributeUpdate(uuid.uuid4(), AttributeUpdateType.REPLACE, 1)]
        )
    with pytest.raises(SegmentNotFound):
        await store.wait_for_data("nope", 0, 0.01)
    await store.create_segment("t")
    with pytest.raises(SegmentNotFound):
        await store.merge("t", "nope")
    with pytest.raises(SegmentNotFound):
        await store.merge("nope", "t")


async def test_append_and_read(store: SegmentStore) -> None:
    await store.create_segment(NAME)
    futs = [store.append(NAME, bytes([i]) * 10) for i in range(5)]
    assert not any(f.done() for f in futs)  # acked only after the log write
    results = await asyncio.gather(*futs)
    assert [r.new_length for r in results] == [10, 20, 30, 40, 50]
    assert store.info(NAME).length == 50
    assert store.get_attribute(NAME, EVENT_COUNT) == 5
    r = await store.read(NAME, 5, 10)
    assert (r.offset, bytes(r.data), r.at_tail, r.end_of_segment) == (
        5,
        b"\0" * 5 + b"\1" * 5,
        False,
        False,
    )
    r = await store.read(NAME, 40, 100)
    assert bytes(r.data) == b"\4" * 10 and r.at_tail and not r.end_of_segment
    r = await store.read(NAME, 50, 100)
    assert r.data == b"" and r.at_tail
    with pytest.raises(InvalidOffset):
        await store.read(NAME, 51, 1)
    # A memoryview argument is copied: reusing the caller's buffer changes nothing stored.
    buf = bytearray(b"abc")
    fut = store.append(NAME, memoryview(buf))
    buf[:] = b"zzz"
    await fut
    assert bytes((await store.read(NAME, 50, 3)).data) == b"abc"


async def test_append_too_large(tmp_path: Path) -> None:
    async with await SegmentStore.open(StoreConfig(tmp_path, max_append_bytes=10)) as s:
        await s.create_segment("a")
        with pytest.raises(AppendTooLarge):
            await s.append("a", b"x" * 11)
        assert (await s.append("a", b"x" * 10)).new_length == 10


async def test_conditional_append(store: SegmentStore) -> None:
    await store.create_segment(NAME)
    # Pipelined: each expected offset counts everything accepted before it.
    f1 = store.append(NAME, b"aaaa", expected_offset=0)
    f2 = store.append(NAME, b"bb", expected_offset=4)
    bad = store.append(NAME, b"c", expected_offset=4)
    assert (await f1).new_length == 4
    assert (await f2).new_length == 6
    with pytest.raises(BadOffset) as err:
        await bad
    assert (err.value.expected, err.value.actual) == (4, 6)
    assert store.info(NAME).length == 6


async def test_errors_come_through_the_future(store: SegmentStore) -> None:
    fut = store.append("missing", b"x")
    assert isinstance(fut, asyncio.Future)
    with pytest.raises(SegmentNotFound):
        await fut


async def test_seal(store: SegmentStore) -> None:
    await store.create_segment(NAME)
    await store.append(NAME, b"12345")
    pending = store.append(NAME, b"678")  # accepted before the seal: lands
    assert await store.seal(NAME) == 8
    assert (await pending).new_length == 8
    assert store.info(NAME).sealed
    with pytest.raises(SegmentSealed):
        await store.append(NAME, b"x")
    with pytest.raises(SegmentSealed):
        await store.seal(NAME)
    with pytest.raises(SegmentSealed):
        await store.update_attributes(
            NAME, [AttributeUpdate(uuid.uuid4(), AttributeUpdateType.REPLACE, 1)]
        )
    r = await store.read(NAME, 0, 100)
    assert bytes(r.data) == b"12345678" and r.end_of_segment and not r.at_tail
    r = await store.read(NAME, 8, 100)
    assert r.data == b"" and r.end_of_segment


async def test_truncate(store: SegmentStore) -> None:
    await store.create_segment(NAME)
    await store.append(NAME, b"0123456789")
    with pytest.raises(InvalidOffset):
        await store.truncate(NAME, 11)
    await store.truncate(NAME, 4)
    assert store.info(NAME).start_offset == 4
    with pytest.raises(InvalidOffset):
        await store.truncate(NAME, 3)
    with pytest.raises(SegmentTruncated) as err:
        await store.read(NAME, 3, 5)
    assert err.value.start_offset == 4
    assert bytes((await store.read(NAME, 4, 3)).data) == b"456"
    await store.seal(NAME)
    await store.truncate(NAME, 10)  # allowed on a sealed segment
    info = store.info(NAME)
    assert (info.start_offset, info.length) == (10, 10)


async def test_delete_and_recreate(store: SegmentStore) -> None:
    await store.create_segment(NAME)
    await store.append(NAME, b"old data")
    await store.delete(NAME)
    assert not store.exists(NAME)
    assert store.segment_names() == []
    with pytest.raises(SegmentNotFound):
        await store.append(NAME, b"x")
    with pytest.raises(SegmentNotFound):
        await store.delete(NAME)
    await store.create_segment(NAME)
    info = store.info(NAME)
    assert info.length == 0 and info.attributes == {}
    await store.append(NAME, b"new")
    assert bytes((await store.read(NAME, 0, 10)).data) == b"new"


async def test_merge(store: SegmentStore) -> None:
    target = "s/t/0.#epoch.0"
    txn = target + "#transaction.00000000000000000000000000000001"
    await store.create_segment(target)
    await store.create_segment(txn)
    await store.append(target, b"head-", event_count=2)
    await store.append(txn, b"txn-one;", event_count=3)
    await store.append(txn, b"txn-two;", event_count=4)
    assert await store.merge(target, txn) == 21
    assert not store.exists(txn)
    assert bytes((await store.read(target, 0, 100)).data) == b"head-txn-one;txn-two;"
    assert store.get_attribute(target, EVENT_COUNT) == 9
    # A transient source counts as one event, whatever it holds.
    transient = target + "#transient.1"
    await store.create_segment(transient, segment_type=SEGMENT_TYPE_TRANSIENT)
    await store.append(transient, b"t", event_count=5)
    assert await store.merge(target, transient) == 22
    assert store.get_attribute(target, EVENT_COUNT) == 10
    # A sealed target refuses; the source stays.
    src = target + "#transaction.2"
    await store.create_segment(src)
    await store.seal(target)
    with pytest.raises(SegmentSealed):
        await store.merge(target, src)
    assert store.exists(src)
    with pytest.raises(InvalidOffset):
        await store.merge(src, src)


async def test_merge_truncated_source_moves_readable_bytes(store: SegmentStore) -> None:
    await store.create_segment("t")
    await store.create_segment("t#transaction.1")
    await store.append("t#transaction.1", b"0123456789")
    await store.truncate("t#transaction.1", 6)
    assert await store.merge("t", "t#transaction.1") == 4
    assert bytes((await store.read("t", 0, 10)).data) == b"6789"


async def test_attributes(store: SegmentStore) -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    await store.create_segment(NAME)
    assert store.get_attribute(NAME, a) == NULL_ATTRIBUTE_VALUE
    up = AttributeUpdate
    T = AttributeUpdateType
    await store.update_attributes(NAME, [up(a, T.NONE, 5), up(b, T.ACCUMULATE, 3)])
    assert (store.get_attribute(NAME, a), store.get_attribute(NAME, b)) == (5, 3)
    await store.update_attributes(NAME, [up(b, T.ACCUMULATE, 4), up(b, T.ACCUMULATE, 1)])
    assert store.get_attribute(NAME, b) == 8
    with pytest.raises(BadAttributeUpdate):
        await store.update_attributes(NAME, [up(a, T.NONE, 6)])
    with pytest.raises(BadAttributeUpdate):
        await store.update_attributes(NAME, [up(a, T.REPLACE_IF_GREATER, 5)])
    await store.update_attributes(NAME, [up(a, T.REPLACE_IF_GREATER, 9)])
    assert store.get_attribute(NAME, a) == 9
    # CAS: a wrong compare value fails the whole update, atomically.
    with pytest.raises(BadAttributeUpdate):
        await store.update_attributes(
            NAME, [up(b, T.REPLACE, 100), up(a, T.REPLACE_IF_EQUALS, 1, compare_value=8)]
        )
    assert (store.get_attribute(NAME, a), store.get_attribute(NAME, b)) == (9, 8)
    await store.update_attributes(NAME, [up(a, T.REPLACE_IF_EQUALS, 1, compare_value=9)])
    assert store.get_attribute(NAME, a) == 1
    # CAS against "absent", and removal by setting the NULL value.
    c = uuid.uuid4()
    await store.update_attributes(
        NAME, [up(c, T.REPLACE_IF_EQUALS, 2, compare_value=NULL_ATTRIBUTE_VALUE)]
    )
    await store.update_attributes(NAME, [up(c, T.REPLACE, NULL_ATTRIBUTE_VALUE)])
    assert store.get_attribute(NAME, c) == NULL_ATTRIBUTE_VALUE
    assert c not in store.info(NAME).attributes
    with pytest.raises(BadAttributeUpdate):
        await store.update_attributes(NAME, [up(a, T.REPLACE, 2**63)])


async def test_writer_event_numbers_and_duplicates(store: SegmentStore) -> None:
    w = uuid.uuid4()
    await store.create_segment(NAME)
    r = await store.append(NAME, b"e1", writer_id=w, event_number=1)
    assert r == AppendResult(2, False)
    assert store.get_attribute(NAME, w) == 1
    dup = await store.append(NAME, b"e1", writer_id=w, event_number=1)
    assert dup == AppendResult(2, True)
    older = await store.append(NAME, b"e0", writer_id=w, event_number=0)
    assert older.duplicate
    await store.append(NAME, b"e5", writer_id=w, event_number=5, event_count=3)
    assert store.info(NAME).length == 4
    assert store.get_attribute(NAME, w) == 5
    assert store.get_attribute(NAME, EVENT_COUNT) == 4
    assert store.stats()["duplicates"] == 2


async def test_duplicate_in_flight_completes_after_original(store: SegmentStore) -> None:
    w = uuid.uuid4()
    await store.create_segment(NAME)
    order: list[str] = []
    original = store.append(NAME, b"payload", writer_id=w, event_number=7)
    resent = store.append(NAME, b"payload", writer_id=w, event_number=7)
    original.add_done_callback(lambda f: order.append("original"))
    resent.add_done_callback(lambda f: order.append("resent"))
    assert not resent.done()  # the original is not durable yet, so neither is the resend
    assert (await resent) == AppendResult(7, True)
    assert original.done() and (await original) == AppendResult(7, False)
    assert order == ["original", "resent"]
    assert store.info(NAME).length == 7


async def test_read_across_cache_and_chunk_files(tmp_path: Path) -> None:
    cfg = small_config(tmp_path, read_cache_bytes=4096, flush_bytes=1024, chunk_file_bytes=3000)
    async with await SegmentStore.open(cfg) as s:
        await s.create_segment(NAME)
        expected = bytearray()
        for i in range(100):
            piece = bytes([i]) * 97
            expected += piece
            await s.append(NAME, piece)
        # Let the storage writer flush and the cache evict down to its budget.
        for _ in range(500):
            if s.stats()["cache_bytes"] <= 4096 and s.stats()["unflushed_bytes"] == 0:
                break
            await asyncio.sleep(0.01)
        assert s.stats()["cache_bytes"] <= 4096
        assert s.try_read(NAME, 0, 10) is None  # evicted: must come from a chunk file
        # Read everything in odd-sized pieces that straddle chunk files and the cache edge.
        got = bytearray()
        while len(got) < len(expected):
            r = await s.read(NAME, len(got), 1234)
            assert len(r.data) > 0
            got += r.data
        assert got == expected
        whole = await s.read(NAME, 0, len(expected))
        assert bytes(whole.data) == bytes(expected) and whole.at_tail
        # A read starting in chunk files and ending in the cache is served in one piece.
        cache_start = len(expected) - int(s.stats()["cache_bytes"])
        r = await s.read(NAME, cache_start - 50, 100)
        assert bytes(r.data) == bytes(expected[cache_start - 50 : cache_start + 50])


async def test_wait_for_data(store: SegmentStore) -> None:
    loop = asyncio.get_running_loop()
    await store.create_segment(NAME)
    # Already there: returns at once.
    await store.append(NAME, b"abc")
    await asyncio.wait_for(store.wait_for_data(NAME, 1, 10), 1)
    # Woken by a commit.
    t0 = loop.time()
    waiter = asyncio.create_task(store.wait_for_data(NAME, 3, 10))
    await asyncio.sleep(0.02)
    assert not waiter.done()
    await store.append(NAME, b"d")
    await asyncio.wait_for(waiter, 1)
    assert loop.time() - t0 < 2
    # Not woken by a commit that stays at or below the offset.
    waiter = asyncio.create_task(store.wait_for_data(NAME, 10, 10))
    await store.append(NAME, b"e")
    await asyncio.sleep(0.02)
    assert not waiter.done()
    # Woken by a seal.
    await store.seal(NAME)
    await asyncio.wait_for(waiter, 1)
    # Timeout.
    await store.create_segment("other")
    t0 = loop.time()
    await store.wait_for_data("other", 0, 0.05)
    assert 0.04 <= loop.time() - t0 < 1
    # Woken by a delete.
    waiter = asyncio.create_task(store.wait_for_data("other", 0, 10))
    await asyncio.sleep(0.01)
    await store.delete("other")
    await asyncio.wait_for(waiter, 1)


async def test_multiple_containers_route_by_parent(tmp_path: Path) -> None:
    cfg = small_config(tmp_path, container_count=4)
    names = [f"scope/stream{i}/0.#epoch.0" for i in range(20)]
    async with await SegmentStore.open(cfg) as s:
        for n in names:
            await s.create_segment(n)
            await s.append(n, n.encode())
            # A transaction lands with its parent, so the merge works.
            await s.create_segment(n + "#transaction.1")
            await s.append(n + "#transaction.1", b"+txn")
            await s.merge(n, n + "#transaction.1")
        assert sorted(s.segment_names()) == sorted(names)
    assert len(list((tmp_path).glob("container-*"))) == 4
    async with await SegmentStore.open(cfg) as s:
        for n in names:
            assert bytes((await s.read(n, 0, 100)).data) == n.encode() + b"+txn"
    with pytest.raises(StorageError):
        await SegmentStore.open(small_config(tmp_path, container_count=2))


async def test_commit_hook_and_stats(store: SegmentStore) -> None:
    seen: list[tuple[int, float]] = []
    store.on_commit = lambda n, secs: seen.append((n, secs))
    await store.create_segment(NAME)
    await asyncio.gather(*(store.append(NAME, b"x" * 100) for _ in range(50)))
    assert sum(n for n, _ in seen) == 51
    assert all(secs >= 0 for _, secs in seen)
    assert len(seen) < 51  # group commit: many appends per fsync
    st = store.stats()
    assert st["appends"] == 50 and st["append_bytes"] == 5000
    assert st["segments"] == 1 and st["fsyncs"] >= 1 and st["log_bytes"] > 5000


async def test_closed_store_refuses(tmp_path: Path) -> None:
    s = await SegmentStore.open(small_config(tmp_path))
    await s.create_segment("a")
    await s.close()
    with pytest.raises(StorageError) as err:
        await s.append("a", b"x")
    assert err.value.retriable


async def test_one_store_per_directory(tmp_path: Path) -> None:
    async with await SegmentStore.open(small_config(tmp_path)):
        with pytest.raises(StorageError, match="in use"):
            await SegmentStore.open(small_config(tmp_path))
    async with await SegmentStore.open(small_config(tmp_path)):  # released by close
        pass
