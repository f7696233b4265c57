"""Resource budgets and timeouts (issue 13 items 2 and 9) against a real server: what a
hostile connection can make the server hold is bounded, timeouts end connections that
never send Hello, stall mid-frame or never read, and memory returns afterwards."""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
import uuid
from typing import TYPE_CHECKING

from segmentstore_client.protocol import (
    Hello,
    ReadSegment,
    SegmentRead,
    block_end,
    encode,
    frame_event,
)

from .wire import WireClient, next_id, unique

if TYPE_CHECKING:
    from conftest import ServerFactory, ServerProcess  # tests/conftest.py

HEADER = struct.Struct(">ii")
MiB = 1024 * 1024
HELLO = encode(Hello(17, 5))


async def raw(server: ServerProcess) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(server.host, server.port)


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> float:
    """Seconds until the server closed the connection (reading and dropping what it sent)."""
    t0 = time.monotonic()
    with contextlib.suppress(ConnectionError):
        while await asyncio.wait_for(reader.read(1 << 20), seconds):
            pass
    return time.monotonic() - t0


async def fill_segment(server: ServerProcess, name: str, size: int) -> None:
    async with await WireClient.connect(server.host, server.port) as c:
        await c.create_segment(name)
        w = uuid.uuid4()
        await c.setup_append(w, name)
        chunk = frame_event(b"d" * (MiB - 8))
        for n in range(1, size // MiB + 1):
            c.send(block_end(w, chunk, 1, n, next_id()))
        await c.wait_acked(w, size // MiB, timeout=60)


async def test_connection_without_hello_or_with_a_stalled_frame_is_closed(
    server_factory: ServerFactory,
) -> None:
    env = {"SEGMENTSTORE_HELLO_TIMEOUT_S": "0.5", "SEGMENTSTORE_FRAME_TIMEOUT_S": "0.7"}
    server = server_factory(env=env)
    server.start()
    silent_r, _silent_w = await raw(server)
    half_r, half_w = await raw(server)
    half_w.write(HELLO + HEADER.pack(11, 1 * MiB) + b"\0" * 1000)  # a frame never finished
    slow_r, slow_w = await raw(server)
    slow_w.write(HELLO + HEADER.pack(11, 4000))
    async with await WireClient.connect(server.host, server.port) as good:

        async def trickle() -> None:  # slowloris: progress, but the frame never completes
            with contextlib.suppress(ConnectionError):
                for _ in range(100):
                    slow_w.write(b"\0")
                    await asyncio.sleep(0.05)

        trickler = asyncio.create_task(trickle())
        waits = await asyncio.gather(
            closed_within(silent_r, 5), closed_within(half_r, 5), closed_within(slow_r, 5)
        )
        trickler.cancel()
        assert all(0.3 < w < 3 for w in waits), waits
        await asyncio.sleep(0.5)  # idle after Hello: not a timeout
        await good.keepalive()
        assert not good.is_closed


async def test_client_that_never_reads_is_bounded_then_dropped(
    server_factory: ServerFactory,
) -> None:
    """200 x 2 MiB reads of data on chunk files from a client that never reads (issue
    13 item 2: ~405 MiB before): the server holds one share, then drops the connection."""
    server = server_factory(env={"SEGMENTSTORE_WRITE_STALL_TIMEOUT_S": "3"})
    server.start()
    name = unique("big")
    await fill_segment(server, name, 24 * MiB)
    server.stop()
    server.start()  # the read cache is empty: reads come from chunk files
    base = server.rss()
    reader, writer = await raw(server)
    writer.transport.set_write_buffer_limits(high=64 * MiB)
    writer.write(HELLO)
    for i in range(200):
        writer.write(encode(ReadSegment(name, (i % 12) * 2 * MiB, 2 * MiB, "", next_id())))
    peak = base
    async with await WireClient.connect(server.host, server.port) as good:
        t0 = time.monotonic()
        for i in range(10):
            await asyncio.sleep(0.2)
            peak = max(peak, server.rss())
            reply = await good.read(name, i * MiB, 4096, timeout=2)
            assert isinstance(reply, SegmentRead) and len(reply.data) == 4096
        assert peak - base < 80 * MiB, f"server grew by {(peak - base) / MiB:.0f} MiB"
        # The connection is dropped once its replies have not drained for 3 s.
        await asyncio.sleep(max(0.0, 4.5 - (time.monotonic() - t0)))
        assert await closed_within(reader, 5) < 5
        await good.keepalive()
    writer.close()


async def test_partial_frames_are_bounded_store_wide_and_memory_returns(
    server_factory: ServerFactory,
) -> None:
    """40 connections each send 4 MiB of a 16 MiB frame: the store-wide input budget
    (8 MiB here) stops reading them; the frame timeout ends them; memory returns."""
    env = {"SEGMENTSTORE_STORE_INPUT_BYTES": str(8 * MiB), "SEGMENTSTORE_FRAME_TIMEOUT_S": "2"}
    server = server_factory(env=env)
    server.start()
    base = server.rss()
    conns = [await raw(server) for _ in range(40)]
    body = b"\x01" * (4 * MiB)
    for _, w in conns:
        w.transport.set_write_buffer_limits(high=16 * MiB)
        w.write(HELLO + HEADER.pack(11, 15 * MiB) + body)
    peak = base
    async with await WireClient.connect(server.host, server.port) as good:
        for _ in range(8):
            await asyncio.sleep(0.15)
            peak = max(peak, server.rss())
            await good.keepalive()
        grew = (peak - base) / MiB
        assert grew < 60, f"server grew by {grew:.0f} MiB (160 unbounded)"
        waits = await asyncio.gather(*(closed_within(r, 10) for r, _ in conns))
        assert max(waits) < 8, waits
        await asyncio.sleep(1.5)  # one sweep hands the freed memory back
        after = server.rss()
        await good.keepalive()
    for _, w in conns:
        w.close()
    assert after - base < 40 * MiB, f"{(after - base) / MiB:.0f} MiB still held after"
