"""Issue 19: no timer-driven wait on the path of a lone event. With a linger far longer
than the test's bound, an event written when nothing is in flight is sent at once, and one
queued behind an in-flight append is sent as soon as that append is acknowledged."""

from __future__ import annotations

import asyncio
import time

import segmentstore_client as sc

LINGER = 30.0  # any wait on the linger would blow the bounds below


async def test_lone_events_do_not_wait_for_the_linger(client: sc.Client, segment: str) -> None:
    await client.create_segment(segment)
    async with client.writer(segment, linger=LINGER) as w:
        started = time.monotonic()
        for i in range(20):
            await asyncio.wait_for(await w.write(b"e%d" % i), 10)
        assert time.monotonic() - started < 10


async def test_queued_event_goes_when_the_inflight_append_is_acked(
    client: sc.Client, segment: str
) -> None:
    await client.create_segment(segment)
    async with client.writer(segment, linger=LINGER) as w:
        for _ in range(5):
            first = await w.write(b"a" * 100)  # nothing in flight: sent now
            await asyncio.sleep(0)  # the writer seals and sends it (call_soon)
            second = await w.write(b"b" * 100)  # behind it: sealed by first's ack
            await asyncio.wait_for(asyncio.gather(first, second), 10)
        info = await client.segment_info(segment)
        assert info.length == 10 * (100 + 8)
