"""Issue 19, round 7: a block of a few large events is kept as its frame's parts (the
caller's payloads themselves) and sent with ``writelines``, never joined in the SDK: a
1 MiB join into fresh memory cost the client a page fault per 4 KiB (221-280 per MiB) and
about half its CPU per MiB (``writer_blocks.frame_block``). The bytes on the wire are the
same frame, byte for byte; resending and trimming after a reconnect still work."""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any

import segmentstore_client as sc
from segmentstore_client.protocol import block_end, encode, frame_events
from segmentstore_client.writer_blocks import (
    PARTS_MAX_EVENTS,
    PARTS_MIN_BYTES,
    Block,
    frame_block,
    frame_bytes,
    trim_block,
)

if TYPE_CHECKING:
    from conftest import ServerProcess  # tests/conftest.py

WID = bytes(range(16))


def framed(payloads: list[bytes], last: int, rid: int = 7) -> tuple[bytes | tuple[bytes, ...], int]:
    size = sum(map(len, payloads)) + 8 * len(payloads)
    return frame_block(WID, rid, payloads, list(map(len, payloads)), size, last), size


def codec_frame(payloads: list[bytes], last: int, rid: int = 7) -> bytes:
    import uuid

    wid = uuid.UUID(bytes=WID)
    return encode(block_end(wid, frame_events(payloads), len(payloads), last, rid))


def test_a_block_of_big_events_is_its_parts_and_the_same_bytes() -> None:
    payloads = [os.urandom(64 * 1024) for _ in range(16)]
    frame, _ = framed(payloads, 41)
    assert isinstance(frame, tuple)
    assert all(frame[2 + 2 * i] is p for i, p in enumerate(payloads))  # not copied
    assert b"".join(frame) == frame_bytes(frame) == codec_frame(payloads, 41)


def test_small_or_many_events_are_joined_as_before() -> None:
    small = [b"x" * 100] * 1000
    frame, _ = framed(small, 1000)
    assert isinstance(frame, bytes) and frame == codec_frame(small, 1000)
    many = [b"y" * (PARTS_MIN_BYTES // PARTS_MAX_EVENTS)] * (PARTS_MAX_EVENTS + 1)
    frame, _ = framed(many, 99)
    assert isinstance(frame, bytes) and frame == codec_frame(many, 99)


def test_trimming_a_block_in_parts() -> None:
    payloads = [os.urandom(100 * 1024) for _ in range(4)]
    frame, size = framed(payloads, 41)
    loop = asyncio.new_event_loop()
    try:
        block = Block(41, 4, frame, size, loop.create_future())
        freed = trim_block(block, 1, WID, 7)
    finally:
        loop.close()
    assert freed == len(payloads[0]) + 8 and block.count == 3
    assert frame_bytes(block.frame) == codec_frame(payloads[1:], 41)


class PartsSpy:
    """The connection's real transport; records every part handed to writelines."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.parts: list[Any] = []

    def writelines(self, chunks: list[bytes]) -> None:
        self.parts.extend(chunks)
        self.real.writelines(chunks)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


async def test_big_events_reach_the_server_uncopied_and_intact(
    module_server: ServerProcess, segment: str
) -> None:
    events = [os.urandom(64 * 1024) for _ in range(40)]  # 2.5 MiB: three blocks
    async with sc.connect(module_server.endpoint, pool_size=1) as client:
        await client.create_segment(segment)
        w = client.writer(segment)
        await w.start()
        conn = await client._pool.acquire()
        spy = PartsSpy(conn._transport)
        conn._transport = spy  # type: ignore[assignment]
        await asyncio.wait_for(await w.write_many(events), 20)
        sent = {id(p) for p in spy.parts}
        assert all(id(e) in sent for e in events)  # each payload object went out as itself
        # the connection drops with blocks in flight: they are resent from their parts
        more = [os.urandom(64 * 1024) for _ in range(20)]
        ack = await w.write_many(more)
        conn._transport = spy.real
        spy.real.abort()
        await asyncio.wait_for(ack, 20)
        assert w.reconnects >= 1
        await w.close()
        got = []
        async for event in client.reader(segment):
            got.append(event.data)
            if len(got) == len(events) + len(more):
                break
    assert got == events + more
