"""1,000 hostile connections of every kind (half frames, clients that never read,
slowloris, floods of 2 MiB reads, junk; see ``hostile.py``) while a good client appends
and reads (issue 13). The good client's p99 stays under 100 ms, the server's RSS stays
under 512 MiB and returns near its baseline afterwards, nothing lands in the log as a
storage error or a traceback, and a restart finds every acknowledged event.

The server runs with its defaults except short timeouts (2 s for Hello, a frame and
stalled replies, so the attack's memory is handed back within the test), a 64 MiB read
cache and fsync=never (the latency bound is about the event loop, not the disk). About 40 s; SEGMENTSTORE_TEST_HOSTILE_SECONDS sets the attack's length (default 15).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from segmentstore_client.protocol import SegmentRead, block_end, frame_event
from server.wire import WireClient, event_payload, next_id, parse_events, unique

from segmentstore.server.launcher import ServerProcess

MiB = 1024 * 1024
HOSTILE = Path(__file__).with_name("hostile.py")
RSS_BOUND = 512 * MiB
SETTLE_BOUND = 96 * MiB  # RSS after the attack, above the baseline taken before it
# 100 ms; on a machine shared with other heavy work (load far above the core count) the
# scheduler alone can exceed it: SEGMENTSTORE_TEST_P99_MS raises the bound for such runs.
P99_BOUND = float(os.environ.get("SEGMENTSTORE_TEST_P99_MS", "100")) / 1000


async def good_client(
    server: ServerProcess, name: str, stop: asyncio.Event
) -> tuple[list[float], int]:
    """Append one 1 KiB event and read it back, again and again; latency of each step."""
    latencies: list[float] = []
    async with await WireClient.connect(server.host, server.port) as c:
        w = uuid.uuid4()
        await c.setup_append(w, name)
        n, offset = 0, 0
        while not stop.is_set():
            n += 1
            t0 = time.perf_counter()
            c.send(block_end(w, frame_event(event_payload(0, n, 1024)), 1, n, next_id()))
            await c.wait_acked(w, n, timeout=5)
            t1 = time.perf_counter()
            reply = await c.read(name, offset, 4096, timeout=5)
            t2 = time.perf_counter()
            assert isinstance(reply, SegmentRead) and len(reply.data) == 1032, reply
            offset += len(reply.data)
            latencies += [t1 - t0, t2 - t1]
            await asyncio.sleep(0.01)
        return latencies, n


@pytest.mark.serial  # timing bounds: scripts/test runs it alone
async def test_thousand_hostile_connections(tmp_path: Path) -> None:
    seconds = float(os.environ.get("SEGMENTSTORE_TEST_HOSTILE_SECONDS", "15"))
    env = {
        "SEGMENTSTORE_HELLO_TIMEOUT_S": "2",
        "SEGMENTSTORE_FRAME_TIMEOUT_S": "2",
        "SEGMENTSTORE_WRITE_STALL_TIMEOUT_S": "2",
    }
    # fsync=never: the p99 bound is about the server's event loop under attack, not about
    # the disk (whose fsync latency, shared with other work, would be most of it).
    args = ["--read-cache-mb", "64", "--fsync", "never"]
    server = ServerProcess(tmp_path / "data", args, env, http_port=-1)
    server.start()
    try:
        big, name = unique("big"), unique("good")
        async with await WireClient.connect(server.host, server.port) as setup:
            await setup.create_segment(big)
            await setup.create_segment(name)
            w = uuid.uuid4()
            await setup.setup_append(w, big)
            for n in range(1, 9):
                setup.send(block_end(w, frame_event(b"b" * (MiB - 8)), 1, n, next_id()))
            await setup.wait_acked(w, 8, timeout=30)
        await asyncio.sleep(0.5)
        baseline = server.rss()
        stop = asyncio.Event()
        good = asyncio.create_task(good_client(server, name, stop))
        await asyncio.sleep(1)
        hostile = await asyncio.create_subprocess_exec(
            sys.executable,
            str(HOSTILE),
            server.host,
            str(server.port),
            big,
            str(seconds),
            "1000",
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        peak = baseline
        deadline = time.monotonic() + seconds + 30
        while hostile.returncode is None and time.monotonic() < deadline:
            peak = max(peak, server.rss())
            assert server.running
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(hostile.wait(), 0.2)
        out, _ = await hostile.communicate()
        stats = json.loads(out.decode().strip().splitlines()[-1])
        await asyncio.sleep(4)  # timeouts and the sweep hand memory back
        after = server.rss()
        stop.set()
        latencies, acked = await asyncio.wait_for(good, 30)
    finally:
        if not server.running:
            raise AssertionError("server died:\n" + "".join(server.log[-40:]))
    summary = (
        f"baseline {baseline / MiB:.0f} MiB, peak {peak / MiB:.0f} MiB, after "
        f"{after / MiB:.0f} MiB; good client {len(latencies)} ops, "
        f"p50 {statistics.median(latencies) * 1000:.1f} ms, "
        f"p99 {statistics.quantiles(latencies, n=100)[98] * 1000:.1f} ms; hostile {stats}; "
        + "".join(x for x in server.log if "peaked" in x)[-300:]
    )
    print(summary)
    assert stats["connected"] == 1000 and stats["flood_bytes"] > 0, summary
    assert stats["half_closed_by_server"] >= 190 and stats["slowloris_closed_by_server"] >= 190
    assert peak < RSS_BOUND, summary
    assert after - baseline < SETTLE_BOUND, summary
    assert statistics.quantiles(latencies, n=100)[98] < P99_BOUND, summary
    bad = [x for x in server.log if "Traceback" in x or " ERROR " in x]
    assert not bad, "".join(bad[:20])
    # A restart finds every acknowledged event.
    assert server.stop() == 0
    server.start()
    try:
        async with await WireClient.connect(server.host, server.port) as c:
            events = parse_events(await c.read_all(name))
            assert len(events) >= acked
    finally:
        server.kill()
