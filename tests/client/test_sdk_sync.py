"""The blocking facade against a real server: same behaviour, any thread."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
import segmentstore_client as sc
from segmentstore_client import sync

if TYPE_CHECKING:
    from conftest import ServerProcess

N = 100_000


@pytest.fixture
def sclient(module_server: ServerProcess) -> Iterator[sync.SyncClient]:
    with sync.connect(module_server.endpoint, reconnect_timeout=20) as c:
        yield c


def payload(i: int, size: int = 100) -> bytes:
    return b"%010d" % i + b"." * (size - 10)


def test_sync_write_and_read_100k(sclient: sync.SyncClient, segment: str) -> None:
    sclient.create_segment(segment)
    with sclient.writer(segment) as w:
        acks = [w.write(payload(i)) for i in range(N)]
    assert all(a.done() for a in acks[:: N // 50])
    acks[-1].wait(0)
    assert w.acked_event_number == N
    reader = sclient.reader(segment)
    n = 0
    for event in reader:
        assert event.data == payload(n)
        n += 1
    assert n == N
    assert reader.position.offset == sclient.segment_info(segment).length


def test_sync_write_many_read_batch_and_resume(sclient: sync.SyncClient, segment: str) -> None:
    sclient.create_segment(segment)
    w = sclient.writer(segment, writer_id="sync-w")
    w.write_many([payload(i) for i in range(5000)], first_event_number=1).wait(10)
    w.close()
    assert sclient.last_event_number(segment, "sync-w") == 5000
    with sclient.writer(segment, writer_id="sync-w") as w2:
        w2.write_many([payload(i) for i in range(6000)], first_event_number=1)
        w2.write(b"x", event_number=6001)
        w2.write(b"y")
    reader = sclient.reader(segment)
    first = reader.read_batch()
    saved = reader.position
    reader.close()
    rest: list[bytes] = []
    resumed = sclient.reader(segment, saved)
    while batch := resumed.read_batch():
        rest.extend(e.data for e in batch)
    assert [e.data for e in first] + rest == [payload(i) for i in range(6000)] + [b"x", b"y"]


def test_sync_read_bytes(sclient: sync.SyncClient, segment: str) -> None:
    sclient.create_segment(segment)
    with sclient.writer(segment) as w:
        w.write_many([payload(i) for i in range(100)])
    chunk = sclient.read_bytes(segment, 108, 8)
    assert chunk == sc.ReadChunk(108, b"\x00\x00\x00\x00\x00\x00\x00\x64", False, False)
    assert sclient.read_bytes(segment, 116, 10).data == payload(1)[:10]
    sclient.truncate(segment, 1080)
    with pytest.raises(sc.SegmentTruncated) as info:
        sclient.read_bytes(segment, 0, 8)
    assert info.value.start_offset == 1080
    with pytest.raises(sc.NoSuchSegment):
        sclient.read_bytes(segment + "-missing", 0, 8)


def test_sync_writer_from_many_threads(sclient: sync.SyncClient, segment: str) -> None:
    sclient.create_segment(segment)
    threads, per_thread = 4, 5000
    with sclient.writer(segment) as w:

        def produce(t: int) -> None:
            for i in range(per_thread):
                w.write(b"%d:%06d" % (t, i))

        ts = [threading.Thread(target=produce, args=(t,)) for t in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
    got = [e.data for e in sclient.reader(segment)]
    assert len(got) == threads * per_thread
    for t in range(threads):
        mine = [d for d in got if d.startswith(b"%d:" % t)]
        assert mine == [b"%d:%06d" % (t, i) for i in range(per_thread)]


def test_sync_admin_tables_and_errors(sclient: sync.SyncClient, segment: str) -> None:
    assert sclient.create_segment(segment) is True
    assert sclient.create_segment(segment, exist_ok=True) is False
    with pytest.raises(sc.SegmentAlreadyExists):
        sclient.create_segment(segment)
    with sclient.writer(segment) as w:
        w.write(b"a", expected_offset=0).wait(10)
        with pytest.raises(sc.ConditionalCheckFailed):
            w.write(b"b", expected_offset=0).wait(10)
    assert sclient.event_count(segment) == 1
    assert sclient.compare_and_set_attribute(segment, "k", 1, None)
    assert sclient.get_attribute(segment, "k") == 1
    sclient.seal(segment)
    with pytest.raises(sc.SegmentSealed), sclient.writer(segment) as w:
        w.write(b"late").wait(10)
    assert sclient.delete(segment)
    name = f"sdk/_tables/sync{uuid.uuid4().hex[:8]}"
    table = sclient.table(name)
    assert table.create()
    v = table.put("k", "v", must_not_exist=True)
    entry = table.get("k")
    assert entry is not None and entry.value == b"v" and entry.version == v
    table.put_many([("a", "1"), ("b", "2")])
    assert {k.key for k in table.keys(batch_size=2)} == {b"k", b"a", b"b"}
    assert {e.key: e.value for e in table.items()}[b"a"] == b"1"
    assert table.changes(0).entries
    table.remove_many(["a", "b"])
    assert table.get_many(["a", "b"]) == [None, None]
    assert table.info().entry_count == 1
    assert table.delete()


def test_sync_connect_failure() -> None:
    with pytest.raises(sc.ConnectFailed):
        sync.connect("tcp://127.0.0.1:1", reconnect_timeout=0.3, connect_timeout=0.2)
