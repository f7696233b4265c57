"""Exactly-once under faults: connections cut at random by a proxy, a writer process
killed with SIGKILL and restarted, the server killed and restarted mid-stream."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import segmentstore_client as sc

from .chaos_proxy import ChaosProxy

if TYPE_CHECKING:
    from conftest import ServerProcess

N = 100_000
CHILD = Path(__file__).with_name("writer_child.py")


def payload(i: int) -> bytes:
    return b"%010d" % i + b"." * 90


async def read_all(endpoint: str, segment: str) -> list[bytes]:
    async with sc.connect(endpoint) as c:
        return [e.data async for e in c.reader(segment)]


def assert_exactly_once(got: list[bytes], n: int, first: int = 1) -> None:
    assert len(got) == n, f"{len(got)} events instead of {n}"
    for i, data in enumerate(got):
        if data != payload(i + first):
            raise AssertionError(f"event {i}: {data[:10]!r}, expected {payload(i + first)[:10]!r}")


async def test_writer_through_a_cutting_proxy(module_server: ServerProcess, segment: str) -> None:
    async with ChaosProxy(
        module_server.host, module_server.port, max_cuts=12, cut_after=(50_000, 1_000_000), seed=7
    ) as proxy:
        async with sc.connect(proxy.endpoint, reconnect_timeout=20) as client:
            await client.create_segment(segment, exist_ok=True)
            async with client.writer(segment, block_size=128 * 1024) as w:
                for i in range(1, N + 1):
                    await w.write(payload(i))
                    if i % 5000 == 0:
                        await asyncio.sleep(0)  # let acks and cuts interleave with writes
        assert proxy.cuts >= 5, proxy.cuts
        assert w.reconnects >= 3, w.reconnects
    assert_exactly_once(await read_all(module_server.endpoint, segment), N)


async def test_reader_through_a_cutting_proxy(module_server: ServerProcess, segment: str) -> None:
    async with sc.connect(module_server.endpoint) as client:
        await client.create_segment(segment)
        async with client.writer(segment) as w:
            await w.write_many(payload(i) for i in range(1, N + 1))
    async with ChaosProxy(
        module_server.host, module_server.port, max_cuts=10, cut_after=(50_000, 1_500_000), seed=3
    ) as proxy:
        async with sc.connect(proxy.endpoint, reconnect_timeout=20) as client:
            got = [e.data async for e in client.reader(segment, read_size=256 * 1024)]
        assert proxy.cuts >= 3, proxy.cuts
    assert_exactly_once(got, N)


async def test_read_bytes_through_a_cutting_proxy(
    module_server: ServerProcess, segment: str
) -> None:
    async with sc.connect(module_server.endpoint) as client:
        await client.create_segment(segment)
        async with client.writer(segment) as w:
            await w.write_many(payload(i) for i in range(1, 20_001))
        length = (await client.segment_info(segment)).length
    expected = b"".join(b"\x00\x00\x00\x00\x00\x00\x00\x64" + payload(i) for i in range(1, 20_001))
    assert len(expected) == length
    async with ChaosProxy(
        module_server.host, module_server.port, max_cuts=8, cut_after=(20_000, 200_000), seed=5
    ) as proxy:
        async with sc.connect(proxy.endpoint, reconnect_timeout=20) as client:
            parts: list[bytes] = []
            offset = 0
            for _ in range(length // 1000 + 10):  # 1000 bytes asked per read
                if offset >= length:
                    break
                chunk = await client.read_bytes(segment, offset, 1000)
                parts.append(chunk.data)
                offset = chunk.next_offset
        assert proxy.cuts >= 3, proxy.cuts
    assert b"".join(parts) == expected


async def test_sigkilled_writer_restarted_leaves_no_duplicates(
    module_server: ServerProcess, segment: str
) -> None:
    endpoint = module_server.endpoint
    async with sc.connect(endpoint) as client:
        await client.create_segment(segment)
    writer_id = "crash-test-writer"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    kills = 0
    for kill_at in (15_000, 45_000, 75_000):
        proc = subprocess.Popen(
            [sys.executable, str(CHILD), endpoint, segment, writer_id, str(N)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        acked = 0
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line or line.startswith("done"):
                break
            acked = int(line.split()[1])
            if acked >= kill_at:
                proc.send_signal(signal.SIGKILL)
                kills += 1
                break
        proc.wait(30)
        proc.stdout.close()
    assert kills >= 2
    # A last run replays everything from event 1 and completes.
    done = subprocess.run(
        [sys.executable, str(CHILD), endpoint, segment, writer_id, str(N)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert_exactly_once(await read_all(endpoint, segment), N)
    async with sc.connect(endpoint) as client:
        assert await client.last_event_number(segment, writer_id) == N


async def test_server_killed_and_restarted_mid_stream(server: ServerProcess, segment: str) -> None:
    async with sc.connect(server.endpoint, reconnect_timeout=30) as client:
        await client.create_segment(segment)
        async with client.writer(segment, block_size=64 * 1024) as w:
            for i in range(1, N + 1):
                await w.write(payload(i))
                if i == N // 3:
                    await asyncio.sleep(0.05)  # some blocks acked, some in flight
                    server.kill()
                    server.start()
        assert w.acked_event_number == N
        assert w.reconnects >= 1
    assert_exactly_once(await read_all(server.endpoint, segment), N)
