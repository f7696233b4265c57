"""Issue 19, round 5: a connection sends the first frame of a loop turn at once and the rest
of that turn in one call (``Connection.write``'s cork), against a real server.

A burst of appends from many writers used to cost one ``send`` syscall per block (84,970
sends for 83,764 appends in ``bench_latency.py --active 100``); a lone frame must still go
out without waiting for a loop turn, bytes must keep their order, and what is held must
stay bounded even when the caller never yields."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import segmentstore_client as sc
from segmentstore_client.connection import (
    _CORK_BYTES,
    _KEEPALIVE_FRAME,
    Connection,
    Endpoint,
    open_connection,
)

if TYPE_CHECKING:
    from conftest import ServerProcess  # tests/conftest.py


class CountingTransport:
    """The connection's real transport, with its send calls counted."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.calls = 0
        self.bytes = 0

    def write(self, data: bytes) -> None:
        self.calls += 1
        self.bytes += len(data)
        self.real.write(data)

    def writelines(self, chunks: list[bytes]) -> None:
        self.calls += 1
        self.bytes += sum(map(len, chunks))
        self.real.writelines(chunks)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def spy(conn: Connection) -> CountingTransport:
    counting = CountingTransport(conn._transport)
    conn._transport = counting  # type: ignore[assignment]
    return counting


async def test_a_turns_frames_go_in_two_sends_and_the_first_at_once(
    module_server: ServerProcess,
) -> None:
    conn = await open_connection(Endpoint.parse(module_server.endpoint))
    try:
        await asyncio.sleep(0)  # the Hello's turn is over
        counting = spy(conn)
        conn.write(_KEEPALIVE_FRAME)
        assert counting.calls == 1  # a lone frame does not wait for the next turn
        for _ in range(49):
            conn.write(_KEEPALIVE_FRAME)
        conn.writelines([_KEEPALIVE_FRAME] * 50)
        assert counting.calls == 1  # held until the turn is over
        # ping() sends one more KeepAlive and returns when the server has echoed all 101:
        # every byte arrived, in order (a torn frame would kill the connection).
        await asyncio.wait_for(conn.ping(), 10)
        assert counting.calls == 3  # the turn's first frame, the held 99, then the ping
        assert counting.bytes == 101 * len(_KEEPALIVE_FRAME)
        assert conn.is_open
    finally:
        conn.close()


async def test_what_is_held_stays_bounded_when_the_caller_never_yields(
    module_server: ServerProcess,
) -> None:
    conn = await open_connection(Endpoint.parse(module_server.endpoint))
    try:
        await asyncio.sleep(0)
        counting = spy(conn)
        n = 2 * _CORK_BYTES // len(_KEEPALIVE_FRAME) + 1
        for _ in range(n):
            conn.write(_KEEPALIVE_FRAME)
            assert conn._cork_bytes < _CORK_BYTES
        assert counting.calls >= 3  # the first frame, then a send per bound reached
        await asyncio.wait_for(conn.ping(), 20)
        assert counting.bytes == (n + 1) * len(_KEEPALIVE_FRAME)
    finally:
        conn.close()


async def test_a_held_buffer_is_copied_when_written(module_server: ServerProcess) -> None:
    conn = await open_connection(Endpoint.parse(module_server.endpoint))
    try:
        await asyncio.sleep(0)
        conn.write(_KEEPALIVE_FRAME)
        buf = bytearray(_KEEPALIVE_FRAME)
        conn.write(memoryview(buf))  # held until the next turn
        buf[:] = b"\xff" * len(buf)  # the caller reuses its buffer: a frame no server knows
        await asyncio.wait_for(conn.ping(), 10)  # the server saw two intact KeepAlives
        assert conn.is_open
    finally:
        conn.close()


async def test_drain_pushes_held_frames_to_the_transport(module_server: ServerProcess) -> None:
    conn = await open_connection(Endpoint.parse(module_server.endpoint))
    try:
        await asyncio.sleep(0)
        counting = spy(conn)
        conn.write(_KEEPALIVE_FRAME)
        conn.write(_KEEPALIVE_FRAME)
        await conn.drain()  # backpressure must see every byte written so far
        assert counting.calls == 2
        conn.write(_KEEPALIVE_FRAME)  # still this turn: held behind the drained ones
        assert counting.calls == 2
        await asyncio.wait_for(conn.ping(), 10)
        assert counting.bytes == 4 * len(_KEEPALIVE_FRAME)
    finally:
        conn.close()


async def test_a_burst_from_many_writers_is_acked_in_order_with_few_sends(
    module_server: ServerProcess, segment: str
) -> None:
    async with sc.connect(module_server.endpoint, pool_size=1) as client:
        names = [f"{segment}-{i}" for i in range(50)]
        writers = []
        for name in names:
            await client.create_segment(name)
            w = client.writer(name)
            await w.start()
            writers.append(w)
        conn = await client._pool.acquire()
        await asyncio.sleep(0)
        counting = spy(conn)
        for rnd in range(3):
            acks = [await w.write(b"e%d" % rnd) for w in writers]  # one turn: 50 blocks
            await asyncio.wait_for(asyncio.gather(*acks), 10)
        assert counting.calls <= 3 * 2  # per burst: the first block, then the other 49
        for w in writers:
            await w.close()
        for name in names:
            assert (await client.segment_info(name)).length == 3 * (2 + 8)
