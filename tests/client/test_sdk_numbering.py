"""Event numbers on a real server: a re-created writer replaying explicit numbers writes
each event once, events numbered with gaps never share an append, and a deliberate abort
is not reported as a failure."""

from __future__ import annotations

import asyncio
import logging
import urllib.request
import uuid
from typing import TYPE_CHECKING

import pytest
import segmentstore_client as sc
from segmentstore_client import sync

if TYPE_CHECKING:
    from conftest import ServerProcess  # tests/conftest.py


def ev(i: int) -> bytes:
    return b"event-%04d" % i


async def stored(client: sc.Client, segment: str) -> list[bytes]:
    return [e.data async for e in client.reader(segment)]


async def metrics(server: ServerProcess) -> dict[str, float]:
    """The server's counters (``segmentstore_*_total``) from its /metrics endpoint."""

    def get() -> str:
        url = f"http://127.0.0.1:{server.http_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            body: bytes = r.read()
            return body.decode()

    out: dict[str, float] = {}
    for line in (await asyncio.to_thread(get)).splitlines():
        if line.startswith("segmentstore_") and "{" not in line:
            name, value = line.split(" ", 1)
            out[name] = float(value)
    return out


# -- a re-created writer replays explicit numbers ------------------------------------------


async def test_recreated_writer_replays_explicit_event_numbers(
    client: sc.Client, segment: str
) -> None:
    await client.create_segment(segment)
    async with client.writer(segment, writer_id="W") as w:
        for i in range(1, 10):
            await w.write(ev(i), event_number=i)
    length = (await client.segment_info(segment)).length
    # A new writer with the same id, not started, no first_event_number: its first write
    # waits for AppendSetup, so events 1..9 are judged against what the server holds.
    async with client.writer(segment, writer_id="W") as w:
        replayed = [await w.write(ev(i), event_number=i) for i in range(1, 10)]
        assert all(a.done() and a.exception() is None for a in replayed)
        await w.flush()
        assert (await client.segment_info(segment)).length == length  # nothing was sent
        for i in range(10, 13):
            await w.write(ev(i), event_number=i)
    assert await stored(client, segment) == [ev(i) for i in range(1, 13)]
    assert await client.last_event_number(segment, "W") == 12
    assert await client.event_count(segment) == 12


async def test_recreated_writer_replays_write_many(client: sc.Client, segment: str) -> None:
    await client.create_segment(segment)
    async with client.writer(segment, writer_id="W") as w:
        await w.write_many([ev(i) for i in range(1, 10)], first_event_number=1)
    async with client.writer(segment, writer_id="W") as w:
        await w.write_many([ev(i) for i in range(1, 13)], first_event_number=1)
    # Again, in pieces that straddle what the server holds, and fully durable ones.
    async with client.writer(segment, writer_id="W") as w:
        await w.write_many([ev(i) for i in range(1, 5)], first_event_number=1)
        await w.write_many([ev(i) for i in range(5, 15)], first_event_number=5)
        await w.write_many([ev(i) for i in range(15, 17)], first_event_number=15)
    assert await stored(client, segment) == [ev(i) for i in range(1, 17)]
    assert await client.event_count(segment) == 16
    assert await client.last_event_number(segment, "W") == 16


async def test_numbers_are_judged_only_after_setup(client: sc.Client, segment: str) -> None:
    """A write that arrives while the writer is still setting up (another task started
    it) waits for AppendSetup instead of numbering events as if the server held none."""
    await client.create_segment(segment)
    async with client.writer(segment, writer_id="W") as w:
        await w.write_many([ev(i) for i in range(1, 10)])
    for many in (True, False):
        w = client.writer(segment, writer_id="W")
        starting = asyncio.ensure_future(w.start())
        await asyncio.sleep(0)  # the setup is under way, its answer not yet in
        if many:
            await w.write_many([ev(i) for i in range(1, 13)], first_event_number=1)
        else:
            for i in range(1, 13):
                await w.write(ev(i), event_number=i)
        await starting
        await w.close()
        assert await stored(client, segment) == [ev(i) for i in range(1, 13)]


async def test_numbers_must_increase_above_what_is_durable(client: sc.Client, segment: str) -> None:
    await client.create_segment(segment)
    async with client.writer(segment, writer_id="W") as w:
        await w.write_many([ev(i) for i in range(1, 10)])
    async with client.writer(segment, writer_id="W") as w:
        await w.write(ev(10), event_number=10)
        with pytest.raises(ValueError, match="must increase: 10 follows 10"):
            await w.write(ev(10), event_number=10)  # accepted for sending already
        with pytest.raises(ValueError, match="must increase"):
            await w.write_many([ev(10), ev(11)], first_event_number=10)
        assert (await w.write(b"old", event_number=5)).done()  # durable: a no-op ack
        await w.flush()
        await w.write_many([b"old", ev(11)], first_event_number=10)  # 10 durable, 11 new
        await w.write(ev(12))  # numbering goes on after the last accepted number
    assert await stored(client, segment) == [ev(i) for i in range(1, 13)]


def test_sync_recreated_writer_replays_explicit_event_numbers(
    module_server: ServerProcess, segment: str
) -> None:
    with sync.connect(module_server.endpoint, reconnect_timeout=20) as c:
        c.create_segment(segment)
        with c.writer(segment, writer_id="W") as w:
            for i in range(1, 10):
                w.write(ev(i), event_number=i)
        with c.writer(segment, writer_id="W") as w:
            for i in range(1, 13):
                w.write(ev(i), event_number=i)
        with c.writer(segment, writer_id="W") as w:
            w.write_many([ev(i) for i in range(1, 15)], first_event_number=1).wait(10)
        assert [e.data for e in c.reader(segment)] == [ev(i) for i in range(1, 15)]
        assert c.event_count(segment) == 14
        assert c.last_event_number(segment, "W") == 14


# -- the grouping rule -----------------------------------------------------------------------


async def test_events_numbered_with_gaps_are_never_batched(server: ServerProcess) -> None:
    """Every append the server stores is counted: gapped events go one per append even
    with a long linger, consecutive ones share appends; two writers with the same id
    sending the same gapped events at once store each event once."""
    segment = f"sdk/gaps{uuid.uuid4().hex[:8]}/0"
    async with sc.connect(server.endpoint, reconnect_timeout=20) as client:
        await client.create_segment(segment)
        before = await metrics(server)
        async with client.writer(segment, writer_id="G", linger=0.5) as w:
            for n in range(1, 40, 2):  # 20 events: 1, 3, ..., 39
                await w.write(ev(n), event_number=n)
            await w.write_many([ev(n) for n in range(100, 200)], first_event_number=100)
        after = await metrics(server)
        appends = after["segmentstore_appends_total"] - before["segmentstore_appends_total"]
        events = after["segmentstore_events_total"] - before["segmentstore_events_total"]
        assert events == 120
        assert appends == 20 + 1  # one per gapped event, one for the consecutive run

        # Two writers with one id (two connections), the same gapped events at once.
        racing = f"sdk/race{uuid.uuid4().hex[:8]}/0"
        await client.create_segment(racing)
        numbers = list(range(1, 400, 2))
        async with sc.connect(server.endpoint, reconnect_timeout=20) as other:

            async def attempt(c: sc.Client) -> None:
                async with c.writer(racing, writer_id="R", linger=0.05) as rw:
                    for n in numbers:
                        await rw.write(ev(n), event_number=n)
                        if n % 16 == 1:
                            await asyncio.sleep(0)  # let the other attempt interleave

            before = await metrics(server)
            await asyncio.gather(attempt(client), attempt(other))
            after = await metrics(server)
        assert await stored(client, racing) == [ev(n) for n in numbers]
        stored_appends = after["segmentstore_appends_total"] - before["segmentstore_appends_total"]
        dropped = (
            after["segmentstore_duplicate_appends_total"]
            - before["segmentstore_duplicate_appends_total"]
        )
        # Each event stored by exactly one append; the other attempt's copy was dropped
        # as a duplicate (or never sent: a writer the server fenced for racing reconnects
        # and acknowledges locally what AppendSetup says is durable).
        assert stored_appends == len(numbers)
        assert dropped <= len(numbers)


def test_sync_events_numbered_with_gaps_are_never_batched(server: ServerProcess) -> None:
    segment = f"sdk/gaps{uuid.uuid4().hex[:8]}/0"
    with sync.connect(server.endpoint, reconnect_timeout=20) as c:
        c.create_segment(segment)
        before = asyncio.run(metrics(server))
        with c.writer(segment, writer_id="G", linger=0.5) as w:
            for n in range(1, 40, 2):
                w.write(ev(n), event_number=n)
            w.write(ev(40), event_number=40)  # follows 39: may share 39's append
        after = asyncio.run(metrics(server))
        assert [e.data for e in c.reader(segment)] == [ev(n) for n in [*range(1, 40, 2), 40]]
    appends = after["segmentstore_appends_total"] - before["segmentstore_appends_total"]
    assert 20 <= appends <= 21


# -- abort ---------------------------------------------------------------------------------


async def test_abort_is_not_a_warning(
    client: sc.Client, segment: str, caplog: pytest.LogCaptureFixture
) -> None:
    await client.create_segment(segment)
    caplog.set_level(logging.DEBUG, logger="segmentstore_client")
    w = await client.writer(segment).start()
    await w.write(b"x")
    w.abort()
    aborted = [r for r in caplog.records if "aborted" in r.getMessage()]
    assert aborted and all(r.levelno == logging.DEBUG for r in aborted)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    # An unexpected failure (the segment sealed under the writer) still warns.
    w = await client.writer(segment).start()
    await client.seal(segment)
    with pytest.raises(sc.SegmentSealed):
        await (await w.write(b"y"))
    assert [r for r in caplog.records if r.levelno == logging.WARNING and "failed" in r.message]
    w.abort()
