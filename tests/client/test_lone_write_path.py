"""Issue 19, round 10: what a lone ``write()`` -> ack runs in the SDK. Counted with the
profiler, not timed: the ack's routing hashes the writer id as an int (a UUID hashes and
compares in Python), the ack wakes its awaiting task without ``AckFuture._wake``, an ack
checks the room flag instead of calling ``Event.is_set``, and sealing does not call
``_blocked``. Every event still gets its ack, and a writer waiting for room still wakes."""

from __future__ import annotations

import sys
import uuid
from types import FrameType
from typing import Any

import segmentstore_client as sc
from segmentstore_client.writer_blocks import AckFuture
from segmentstore_client.writer_session import WriterSession

# Python functions the lone path no longer calls (each was once per event)
GONE = {
    uuid.UUID.__hash__.__code__: "UUID.__hash__",
    uuid.UUID.__eq__.__code__: "UUID.__eq__",
    AckFuture._wake.__code__: "AckFuture._wake",
    WriterSession._blocked.__code__: "WriterSession._blocked",
    __import__("asyncio").Event.is_set.__code__: "Event.is_set",
}


class Seen:
    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self.total = 0

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            self.total += 1
            name = GONE.get(frame.f_code)
            if name is not None:
                self.calls[name] = self.calls.get(name, 0) + 1


async def test_a_lone_write_calls_none_of_the_removed_functions(
    client: sc.Client, segment: str
) -> None:
    await client.create_segment(segment)
    async with client.writer(segment) as w:
        for _ in range(5):  # warm up: setup, first blocks
            await (await w.write(b"x" * 100))
        seen = Seen()
        sys.setprofile(seen)
        try:
            for _ in range(20):
                await (await w.write(b"y" * 100))
        finally:
            sys.setprofile(None)
    assert seen.calls == {}
    assert seen.total > 0
    assert await client.event_count(segment) == 25


async def test_a_writer_out_of_room_wakes_on_the_ack(client: sc.Client, segment: str) -> None:
    """The room flag: a write() waiting for ``max_buffered_bytes`` resumes when an ack
    frees bytes (no other event sets the room here)."""
    await client.create_segment(segment)
    bound = 4096
    async with client.writer(segment, block_size=1024, max_buffered_bytes=bound) as w:
        for i in range(300):
            await w.write(b"%04d" % i * 50)
            assert w.buffered_bytes <= bound + 208
    assert await client.event_count(segment) == 300
