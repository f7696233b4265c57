#!/usr/bin/env python3
"""The Databus relay's /stream read rate beside the wire protocol's, and its tail latency.

Starts a segmentstore server (``--fsync``, default interval), writes ``--events`` Databus
v2 events (``--size`` byte values, windows of 10 events) to one segment and the same
number of plain payloads to another, then measures in the same run:

* wire       the SDK's EventReader catching up on the Databus segment (binary wire protocol)
* relay bin  ``/stream?output=binary`` from the oldest event to the end, 4 MiB answers,
             1 consumer and 16 at once (aggregate); the client only walks event lengths.
             Events are counted with their window markers on both sides (the wire
             reader sees the markers as events too), so the ratios compare like with like
* relay json ``/stream?output=json``, the same (no compression unless the label says gzip:
             the bytes/s are then the compressed bytes)
* relay raw  binary, on the segment of plain payloads (each converted to a Databus event;
             each is a window, so its count includes one marker per event)
* tail       append -> HTTP consumer latency, one event every 2 ms, p50/p99 (the
             consumer long-polls /stream with its checkpoint), beside an SDK reader
             following the same segment over the wire protocol in the same process
             (the store's own append -> tail-read latency: the baseline)

Every line names the fsync mode. Usage::

    .venv/bin/python scripts/bench_relay.py
    .venv/bin/python scripts/bench_relay.py --events 50000 --size 1000 --fsync always
    .venv/bin/python scripts/bench_relay.py --tail-only --tail 3000
    .venv/bin/python scripts/bench_relay.py --segments 3000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "client"))

import aiohttp  # noqa: E402
import segmentstore_client as sc  # noqa: E402
from segmentstore_client.formats import databus  # noqa: E402

READY = re.compile(r"listening on [0-9.]+:(\d+), metrics on http://[0-9.]+:(\d+)/")
_I32 = struct.Struct(">i")


@contextmanager
def server(fsync: str) -> Iterator[tuple[str, str]]:
    with tempfile.TemporaryDirectory(prefix="bench-relay-") as data_dir:
        proc = subprocess.Popen(
            [sys.executable, "-m", "segmentstore", "serve", "--port", "0", "--http-port", "0",
             "--data-dir", data_dir, "--fsync", fsync, "--log-level", "INFO"],
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert proc.stderr is not None
            for line in proc.stderr:
                m = READY.search(line)
                if m:
                    break
            else:
                raise SystemExit("server did not start")
            threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep draining
            yield f"tcp://127.0.0.1:{m.group(1)}", f"http://127.0.0.1:{m.group(2)}"
        finally:
            proc.terminate()
            proc.wait(30)


async def fill(endpoint: str, segment: str, payloads: list[bytes]) -> None:
    async with sc.connect(endpoint) as client:
        await client.create_segment(segment)
        async with client.writer(segment) as w:
            for i in range(0, len(payloads), 10_000):
                await w.write_many(payloads[i : i + 10_000])


def databus_payloads(count: int, size: int) -> list[bytes]:
    out = []
    value = b"v" * size
    for i in range(count):
        out.append(databus.encode(databus.DatabusEvent(1 + i // 10, i, value, 1)))
        if i % 10 == 9:
            out.append(databus.encode(databus.end_of_period(1 + i // 10)))
    return out


async def wire_read(endpoint: str, segment: str, count: int) -> tuple[int, int, float]:
    async with sc.connect(endpoint) as client:
        started = time.perf_counter()
        events = nbytes = 0
        async with client.reader(segment) as reader:
            while events < count:
                batch = await reader.read_batch()
                events += len(batch)
                nbytes += sum(len(e.data) for e in batch)
        return events, nbytes, time.perf_counter() - started


def count_binary(body: bytes) -> int:
    """Events in a binary answer, window markers included as the wire figure includes
    them (walks the lengths only)."""
    pos, n, events = 0, len(body), 0
    while pos < n:
        (total,) = _I32.unpack_from(body, pos + 17)
        events += 1
        pos += total
    return events


async def relay_read(
    url: str, source: str, output: str, expect: int, gzip: bool = False
) -> tuple[int, int, float]:
    events = nbytes = 0
    checkpoint = ""
    started = time.perf_counter()
    headers = {"Accept-Encoding": "gzip" if gzip else "identity"}
    async with aiohttp.ClientSession(headers=headers) as session:
        while events <= expect * 2:  # ends at no-events; the bound only guards a bug
            params = {"sources": source, "size": str(4 << 20), "output": output, "timeout": "0"}
            if checkpoint:
                params["checkPoint"] = checkpoint
            async with session.get(url + "/stream", params=params) as r:
                body = await r.read()
                checkpoint = r.headers["X-Databus-Checkpoint"]
                if r.headers.get("X-Databus-Error") == "no-events":
                    break
            nbytes += len(body)
            if output == "json":
                events += body.count(b"\n")
            else:
                events += count_binary(body)
    return events, nbytes, time.perf_counter() - started


async def many(
    url: str, source: str, output: str, expect: int, n: int, gzip: bool = False
) -> tuple[int, int, float]:
    started = time.perf_counter()
    results = await asyncio.gather(
        *(relay_read(url, source, output, expect, gzip) for _ in range(n))
    )
    return sum(r[0] for r in results), sum(r[1] for r in results), time.perf_counter() - started


async def tail_latency(
    endpoint: str, url: str, segment: str, count: int
) -> tuple[list[float], list[float]]:
    """(HTTP consumer latencies, wire-protocol tail reader latencies) in ms of the same
    ``count`` events, both consumers in this process at once (the wire reader is the
    baseline: the store's own append -> tail read path)."""
    async with sc.connect(endpoint) as client:
        await client.create_segment(segment)
        async with aiohttp.ClientSession() as session:
            source = segment.replace("/", ".")
            params = {"sources": source, "streamFromLatestScn": "true", "timeout": "0"}
            async with session.get(url + "/stream", params=params) as r:
                checkpoint = r.headers["X-Databus-Checkpoint"]
            latencies: list[float] = []
            wire: list[float] = []

            async def consume() -> None:
                nonlocal checkpoint
                while len(latencies) < count:
                    p = {"sources": source, "checkPoint": checkpoint, "timeout": "5000"}
                    async with session.get(url + "/stream", params=p) as r:
                        body = await r.read()
                        checkpoint = r.headers["X-Databus-Checkpoint"]
                    now = time.time_ns()
                    for ev in databus_events(body):
                        latencies.append((now - ev.timestamp_ns) / 1e6)

            async def consume_wire() -> None:
                async for event in client.reader(segment, follow=True):
                    ev = databus.decode(event.data)
                    if not ev.end_of_period:
                        wire.append((time.time_ns() - ev.timestamp_ns) / 1e6)
                        if len(wire) >= count:
                            return

            consumer = asyncio.ensure_future(consume())
            wire_consumer = asyncio.ensure_future(consume_wire())
            async with client.writer(segment, linger=0) as w:  # no batching delay
                for i in range(count):
                    ev = databus.DatabusEvent(i + 1, i, b"x" * 100, 1, timestamp_ns=time.time_ns())
                    await w.write_many(
                        [databus.encode(ev), databus.encode(databus.end_of_period(i + 1))]
                    )
                    await asyncio.sleep(0.002)
            await asyncio.wait_for(asyncio.gather(consumer, wire_consumer), 30)
            return latencies, wire


def databus_events(body: bytes) -> list[databus.DatabusEvent]:
    from segmentstore_client.relay import decode_events

    return [e for e in decode_events(body, False) if not e.end_of_period]


def line(label: str, fsync: str, events: int, nbytes: int, seconds: float, base: float) -> str:
    rate = events / seconds
    ratio = f"  {rate / base:5.0%} of wire" if base else ""
    return (f"{label:<28} fsync={fsync:<8} {events:>9,} events {rate:>11,.0f} ev/s "
            f"{nbytes / seconds / 1e6:>8.1f} MB/s{ratio}")  # fmt: skip


async def run(args: argparse.Namespace) -> None:
    with server(args.fsync) as (endpoint, url):
        if args.segments:
            await request_cost(endpoint, url, args.segments)
            return
        if args.tail_only:
            await print_tail(endpoint, url, args)
            return
        n = args.events
        await fill(endpoint, "bench/db/0", databus_payloads(n, args.size))
        await fill(endpoint, "bench/raw/0", [b"r" * args.size] * n)
        async with (  # the relay indexes both sources once, before anything is timed
            aiohttp.ClientSession() as session,
            session.get(url + "/stats") as r,
        ):
            await r.read()
        print(f"# {n:,} events of {args.size} B values, fsync={args.fsync}; best of {args.reps}")
        best = lambda rs: min(rs, key=lambda r: r[2])  # noqa: E731
        wire = best(
            [await wire_read(endpoint, "bench/db/0", n + n // 10) for _ in range(args.reps)]
        )
        wire_rate = wire[0] / wire[2]
        print(line("wire catch-up (SDK reader)", args.fsync, *wire, 0))
        for label, source, output, k, gz in (
            ("relay binary, 1 consumer", "bench.db.0", "binary", 1, False),
            ("relay binary gzip, 1", "bench.db.0", "binary", 1, True),
            ("relay json, 1 consumer", "bench.db.0", "json", 1, False),
            ("relay binary raw, 1", "bench.raw.0", "binary", 1, False),
            ("relay binary, 16 consumers", "bench.db.0", "binary", 16, False),
            ("relay json, 16 consumers", "bench.db.0", "json", 16, False),
        ):
            reps = args.reps if k == 1 else 1
            result = best([await many(url, source, output, n, k, gz) for _ in range(reps)])
            print(line(label, args.fsync, *result, wire_rate))
        await print_tail(endpoint, url, args)


async def request_cost(endpoint: str, url: str, count: int) -> None:
    """The time of one /stream request at the tail (timeout 0) with 1 segment in the
    store, then with ``count`` more (the source catalogue's cost per request)."""
    async with sc.connect(endpoint) as client, aiohttp.ClientSession() as session:
        await fill(endpoint, "bench/one/0", [b"x"])
        params = {"sources": "bench.one.0", "timeout": "0", "streamFromLatestScn": "true"}

        async def timed(n: int) -> list[float]:
            out = []
            for _ in range(n):
                started = time.perf_counter()
                async with session.get(url + "/stream", params=params) as r:
                    await r.read()
                out.append((time.perf_counter() - started) * 1000)
            return sorted(out)

        one = await timed(50)
        for i in range(count):
            await client.create_segment(f"bench/many/{i}")
        first = await timed(1)
        many = await timed(50)
        load = " ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"/stream at the tail: 1 segment p50 {one[25]:.1f} ms; {count + 1:,} segments: "
              f"first request {first[0]:.0f} ms, then p50 {many[25]:.1f} ms p90 {many[45]:.1f} ms "
              f"(load average {load})")  # fmt: skip


async def print_tail(endpoint: str, url: str, args: argparse.Namespace) -> None:
    lat, wire = await tail_latency(endpoint, url, "bench/tail/0", args.tail)
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    for label, values in (
        ("tail append -> HTTP consumer", lat),
        ("tail append -> wire reader", wire),
    ):
        q = statistics.quantiles(values, n=100)
        print(f"{label:<28} fsync={args.fsync:<8} p50 {statistics.median(values):.2f} ms  "
              f"p99 {q[98]:.2f} ms  ({len(values)} events; load average {load})")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=100, help="value bytes per event")
    ap.add_argument("--fsync", default="interval")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--tail", type=int, default=500, help="events in the latency test")
    ap.add_argument("--tail-only", action="store_true", help="only the latency test")
    ap.add_argument("--segments", type=int, default=0, help="only: /stream cost with N segments")
    args = ap.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover
        pass
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
