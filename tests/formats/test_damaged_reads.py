"""A damaged event inside a formatted reader's batch, in both facades: the good records
before it come first, then ``DamagedEvent`` (segment, offset, cause) with the reader
positioned after it, then the records after it; or, with ``errors="skip"``, every good
record and a count of what was skipped."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import pytest
import segmentstore_client as sc
from segmentstore_client import sync
from segmentstore_client.formats import kafka
from segmentstore_client.formats._sdk import FormattedReader
from segmentstore_client.formats.errors import CrcMismatch, DamagedEvent, TruncatedInput

if TYPE_CHECKING:
    from conftest import ServerProcess  # tests/conftest.py


def message(i: int) -> bytes:
    return kafka.encode_message(b"value-%d" % i, b"key", timestamp=i)


def damaged(i: int) -> bytes:
    bad = bytearray(message(i))
    bad[-1] ^= 0x01
    return bytes(bad)


# good 0, good 1, damaged, good 3, good 4, truncated, good 6
LAYOUT = [message(0), message(1), damaged(2), message(3), message(4), message(5)[:10], message(6)]
OFFSETS = [sum(8 + len(e) for e in LAYOUT[:i]) for i in range(len(LAYOUT) + 1)]


def values(batch: list[Any]) -> list[bytes]:
    return [m.value for m in batch]


async def write(client: sc.Client, payloads: list[bytes]) -> str:
    seg = f"formats/damaged{uuid.uuid4().hex[:10]}/0"
    await client.create_segment(seg)
    async with client.writer(seg) as w:
        await w.write_many(payloads)
    return seg


async def test_read_batch_returns_the_good_records_then_raises(fclient: sc.Client) -> None:
    seg = await write(fclient, LAYOUT)
    r = fclient.reader(seg, format="kafka")
    got: list[bytes] = []
    errors: list[DamagedEvent] = []
    for _ in range(20):
        try:
            batch = await r.read_batch()
        except DamagedEvent as e:
            errors.append(e)
            assert r.position.offset == e.next_offset  # the next read goes on past it
            continue
        if not batch:
            break
        got += values(batch)
        assert r.last_event is not None and r.position.offset == r.last_event.next_offset
    await r.close()
    assert got == [b"value-%d" % i for i in (0, 1, 3, 4, 6)]
    assert [(e.segment, e.offset, e.next_offset) for e in errors] == [
        (seg, OFFSETS[2], OFFSETS[3]),
        (seg, OFFSETS[5], OFFSETS[6]),
    ]
    assert isinstance(errors[0].cause, CrcMismatch) and isinstance(errors[1].cause, TruncatedInput)
    assert isinstance(errors[0], sc.CorruptRecord)  # old handlers of damaged records still catch it


async def test_first_read_stops_before_the_damaged_event(fclient: sc.Client) -> None:
    seg = await write(fclient, LAYOUT)
    r = fclient.reader(seg, format="kafka")
    # All seven events are there before the first read: one batch, cut at the damage.
    assert values(await r.read_batch()) == [b"value-0", b"value-1"]
    assert r.position.offset == OFFSETS[2]  # a checkpoint here re-meets the damaged event
    with pytest.raises(DamagedEvent):
        await r.read_batch()
    assert values(await r.read_batch()) == [b"value-3", b"value-4"]
    await r.close()


async def test_iterating_and_skipping(fclient: sc.Client) -> None:
    seg = await write(fclient, LAYOUT)
    r = fclient.reader(seg, format="kafka")
    seen: list[bytes | str] = []
    for _ in range(20):
        try:
            seen.append((await r.__anext__()).value)
        except DamagedEvent as e:
            seen.append(f"damaged@{e.offset}")
        except StopAsyncIteration:
            break
    await r.close()
    assert seen == [
        b"value-0",
        b"value-1",
        f"damaged@{OFFSETS[2]}",
        b"value-3",
        b"value-4",
        f"damaged@{OFFSETS[5]}",
        b"value-6",
    ]
    s = fclient.reader(seg, format="kafka")
    s.errors = "skip"
    got = []
    while batch := await s.read_batch():
        got += values(batch)
    assert got == [b"value-%d" % i for i in (0, 1, 3, 4, 6)]
    assert s.skipped == 2 and s.last_damage is not None and s.last_damage.offset == OFFSETS[5]
    await s.close()
    only_bad = await write(fclient, [damaged(0), damaged(1)])
    t = fclient.reader(only_bad, format="kafka")
    t.errors = "skip"
    assert await t.read_batch() == [] and t.skipped == 2
    assert [m async for m in t] == []
    await t.close()
    raw = fclient.reader(seg)
    with pytest.raises(ValueError, match="errors"):
        FormattedReader(raw, "kafka", errors="ignore")  # type: ignore[arg-type]
    await raw.close()


def test_blocking_reader_same_rule(module_server: ServerProcess) -> None:
    with sync.connect(module_server.endpoint) as client:
        seg = f"formats/damagedsync{uuid.uuid4().hex[:10]}/0"
        client.create_segment(seg)
        with client.writer(seg) as w:
            w.write_many(LAYOUT)
        with client.reader(seg, format="kafka") as r:
            assert values(r.read_batch()) == [b"value-0", b"value-1"]
            assert r.position.offset == OFFSETS[2]
            with pytest.raises(DamagedEvent) as caught:
                r.read_batch()
            assert (caught.value.segment, caught.value.offset) == (seg, OFFSETS[2])
            assert r.position.offset == OFFSETS[3]
            assert values(r.read_batch()) == [b"value-3", b"value-4"]
            with pytest.raises(DamagedEvent):
                next(r)
            assert [m.value for m in r] == [b"value-6"]
        with client.reader(seg, format="kafka") as s:
            s.errors = "skip"
            assert [m.value for m in s] == [b"value-%d" % i for i in (0, 1, 3, 4, 6)]
            assert s.skipped == 2
