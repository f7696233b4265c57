"""The Prometheus endpoint: after known appends, reads and errors, /metrics shows every
documented series with the values that traffic implies."""

from __future__ import annotations

import asyncio
import re
import urllib.request
import uuid
from pathlib import Path

import pytest
from segmentstore_client.protocol import (
    GetStreamSegmentInfo,
    NoSuchSegment,
    block_end,
    frame_events,
)

from segmentstore.server.launcher import ServerProcess

from .wire import WireClient, next_id, unique

LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$")


async def scrape(http_port: int) -> dict[str, float]:
    def get() -> str:
        url = f"http://127.0.0.1:{http_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            assert r.status == 200
            body: bytes = r.read()
            return body.decode()

    text = await asyncio.to_thread(get)
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = LINE.match(line)
        assert m, f"not a Prometheus sample line: {line!r}"
        out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


async def test_metrics_after_traffic(server: ServerProcess) -> None:
    assert server.http_port > 0
    async with await WireClient.connect(server.host, server.port) as c:
        names = [unique() for _ in range(3)]
        for n in names:
            await c.create_segment(n)
        w = uuid.uuid4()
        await c.setup_append(w, names[0])
        for b in range(10):
            records = frame_events([bytes([b]) * 100] * 5)
            c.send(block_end(w, records, 5, 5 * (b + 1), next_id()))
        await c.wait_acked(w, 50)
        read_bytes = 0
        for offset in (0, 100, 1000, 5000):
            reply = await c.read(names[0], offset, 300)
            read_bytes += len(reply.data)  # type: ignore[attr-defined]
        for _ in range(2):
            missing = unique()
            assert isinstance(
                await c.request(GetStreamSegmentInfo(next_id(), missing, "")), NoSuchSegment
            )
        m = await scrape(server.http_port)

    assert m["segmentstore_appends_total"] == 10
    assert m["segmentstore_events_total"] == 50
    assert m["segmentstore_appended_bytes_total"] == 50 * 108
    assert m["segmentstore_reads_total"] == 4
    assert m["segmentstore_read_bytes_total"] == read_bytes == 4 * 300
    assert m['segmentstore_error_replies_total{reply="NoSuchSegment"}'] == 2
    assert m["segmentstore_open_connections"] == 1
    assert m["segmentstore_segments"] >= 3
    assert m["segmentstore_log_size_bytes"] >= 50 * 108
    assert 0 <= m["segmentstore_recovery_duration_seconds"] < 30
    # Every append is in the latency histogram; the buckets are cumulative.
    assert m['segmentstore_append_latency_seconds_bucket{le="+Inf"}'] == 10
    assert m["segmentstore_append_latency_seconds_count"] == 10
    assert 0 < m["segmentstore_append_latency_seconds_sum"] < 10
    buckets = [
        v for k, v in m.items() if k.startswith("segmentstore_append_latency_seconds_bucket")
    ]
    assert buckets == sorted(buckets)
    # fsync=always: every group commit was fsynced, and together they carried every record
    # (3 creates + 10 appends at least).
    commits = m['segmentstore_group_commit_records_bucket{le="+Inf"}']
    assert 1 <= commits <= 13 + 5
    assert m['segmentstore_fsync_duration_seconds_bucket{le="+Inf"}'] == commits
    assert m["segmentstore_group_commit_records_sum"] >= 13
    assert m["segmentstore_fsync_duration_seconds_sum"] > 0


async def test_recovery_duration_after_restart(server: ServerProcess) -> None:
    async with await WireClient.connect(server.host, server.port) as c:
        name = unique()
        await c.create_segment(name)
        w = uuid.uuid4()
        await c.setup_append(w, name)
        for b in range(200):
            c.send(block_end(w, frame_events([b"r" * 1000] * 10), 10, 10 * (b + 1), next_id()))
        await c.wait_acked(w, 2000, timeout=30)
    server.kill()
    server.start()
    m = await scrape(server.http_port)
    assert 0 < m["segmentstore_recovery_duration_seconds"] < 30
    assert m["segmentstore_segments"] >= 1
    assert m["segmentstore_log_size_bytes"] >= 0
    assert m["segmentstore_open_connections"] == 0
    assert m["segmentstore_appends_total"] == 0  # counters are per process


async def test_gc_pauses_and_the_frozen_startup(module_server: ServerProcess) -> None:
    """The server process freezes what startup made (gc_pauses.py) and times collections:
    the settling full collection is in generation 2's histogram."""
    m = await scrape(module_server.http_port)
    assert m["segmentstore_gc_frozen_objects"] > 10_000  # modules, functions, metadata
    assert m['segmentstore_gc_pause_seconds_count{generation="2"}'] >= 1
    for gen in "012":
        assert f'segmentstore_gc_pause_seconds_bucket{{generation="{gen}",le="+Inf"}}' in m


async def test_native_lane_series(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """/metrics shows the native log lane: lanes, batches it made durable, fallbacks; with
    the lane off (the default) no batch is counted, with it on the appends' batches are."""
    from segmentstore.storage.log_thread import native_lane_available

    monkeypatch.setenv("SEGMENTSTORE_NATIVE_LOG", "1")
    built = native_lane_available()  # the extension is built and the platform has it
    for native in ("0", "1"):
        proc = ServerProcess(tmp_path / native, env={"SEGMENTSTORE_NATIVE_LOG": native})
        proc.start()
        try:
            async with await WireClient.connect(proc.host, proc.port) as c:
                name = unique()
                await c.create_segment(name)
                w = uuid.uuid4()
                await c.setup_append(w, name)
                for b in range(20):  # one at a time: each its own batch
                    c.send(block_end(w, frame_events([b"n" * 100]), 1, b + 1, next_id()))
                    await c.wait_acked(w, b + 1)
            m = await scrape(proc.http_port)
        finally:
            proc.stop()
        lanes = m["segmentstore_native_log_lanes"]
        batches = m["segmentstore_native_log_batches_total"]
        assert m["segmentstore_native_log_fallbacks_total"] == 0
        if native == "1" and built:
            assert lanes >= 1
            assert batches >= 20
        else:
            assert lanes == 0
            assert batches == 0
