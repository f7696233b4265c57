#!/usr/bin/env python3
"""Client SDK throughput and latency, each beside a raw-protocol figure from the same run.

Starts a segmentstore server (or uses ``--endpoint``), then for 100 B, 1 KiB and 64 KiB
events measures:

* raw        a minimal raw-socket asyncio writer: pre-framed events, AppendBlockEnds
             pipelined within the same byte bound as the SDK (the ceiling for any client)
* write      ``await writer.write(e)`` per event, one flush at the end
* write_many ``await writer.write_many(events)``
* sync write / sync write_many   the blocking facade from a plain thread
* read       ``reader.read_batch()`` / ``async for`` / sync iteration, beside raw
             ReadSegment requests that do not parse events
* ack latency p50/p99: one event at a time (idle) and sampled during a write() run

Every figure names the server's fsync mode. Usage::

    .venv/bin/python scripts/bench_client.py                  # fsync=always (default)
    .venv/bin/python scripts/bench_client.py --fsync always,interval --scale 0.5
    .venv/bin/python scripts/bench_client.py --endpoint tcp://127.0.0.1:12345 --fsync-label always
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "client"))

import segmentstore_client as sc  # noqa: E402
from segmentstore_client import sync  # noqa: E402
from segmentstore_client.protocol import (  # noqa: E402
    AppendSetup,
    DataAppended,
    FrameDecoder,
    Hello,
    ReadSegment,
    SegmentRead,
    SetupAppend,
    block_end,
    encode,
    frame_events,
)
from segmentstore_client.streams.reader_group import GroupReader  # noqa: E402

from segmentstore.server.launcher import ServerProcess  # noqa: E402

try:
    import uvloop
except ImportError:  # pragma: no cover
    uvloop = None  # type: ignore[assignment]

T = TypeVar("T")
CONTROLLER = re.compile(r"controller on (tcp://[0-9.]+:\d+)")
BLOCK = 1024 * 1024
BOUND = 32 * 1024 * 1024

# -- the server ----------------------------------------------------------------------------


@contextmanager
def server(fsync: str, controller: bool = False) -> Iterator[tuple[str, int]]:
    """The shared launcher (no SEGMENTSTORE_* inherited); yields (endpoint, pid)."""
    extra = ["--controller-port", "0"] if controller else []
    with tempfile.TemporaryDirectory(prefix="bench-client-") as data_dir:
        proc = ServerProcess(Path(data_dir), ["--fsync", fsync, *extra], http_port=-1)
        proc.start()
        try:
            if controller:
                found = [m.group(1) for ln in proc.log if (m := CONTROLLER.search(ln))]
                yield f"{proc.endpoint}|{found[0]}", proc.pid
            else:
                yield proc.endpoint, proc.pid
        finally:
            with suppress(subprocess.TimeoutExpired):
                proc.stop(20)


# -- raw protocol --------------------------------------------------------------------------


def host_port(endpoint: str) -> tuple[str, int]:
    e = sc.Endpoint.parse(endpoint)
    return e.host, e.port


def frame_blocks(writer_id: uuid.UUID, payloads: list[bytes]) -> list[tuple[bytes, int, int]]:
    """The events as block frames of about BLOCK bytes: (frame, last event number, bytes)."""
    frames: list[tuple[bytes, int, int]] = []
    i, n, number = 0, len(payloads), 0
    while i < n:
        size, j = 0, i
        while j < n and size < BLOCK:
            size += len(payloads[j]) + 8
            j += 1
        records = frame_events(payloads[i:j])
        number += j - i
        frames.append((encode(block_end(writer_id, records, j - i, number, 1)), number, size))
        i = j
    return frames


async def raw_write(endpoint: str, segment: str, payloads: list[bytes]) -> float:
    """Pre-framed blocks, pipelined within the byte bound; returns seconds to last ack."""
    writer_id = uuid.uuid4()
    frames = frame_blocks(writer_id, payloads)
    number = frames[-1][1] if frames else 0
    host, port = host_port(endpoint)
    reader, writer = await asyncio.open_connection(host, port)
    decoder = FrameDecoder()
    writer.write(encode(Hello(17, 5)) + encode(SetupAppend(1, writer_id, segment, "")))

    async def replies() -> list[object]:
        while True:
            data = await reader.read(1 << 16)
            if not data:
                raise ConnectionError("server closed")
            cmds = decoder.feed(data)
            if cmds:
                return list(cmds)

    while not any(isinstance(c, AppendSetup) for c in await replies()):
        pass
    t0 = time.perf_counter()
    inflight: list[tuple[int, int]] = []
    held = 0
    acked = 0
    k = 0
    while acked < number:
        while k < len(frames) and held < BOUND:
            frame, last, size = frames[k]
            writer.write(frame)
            inflight.append((last, size))
            held += size
            k += 1
        for c in await replies():
            if isinstance(c, DataAppended):
                acked = c.event_number
                while inflight and inflight[0][0] <= acked:
                    held -= inflight.pop(0)[1]
    elapsed = time.perf_counter() - t0
    writer.close()
    return elapsed


async def raw_read(endpoint: str, segment: str, length: int) -> float:
    """ReadSegment requests (2 outstanding, 1 MiB each) without event parsing."""
    host, port = host_port(endpoint)
    reader, writer = await asyncio.open_connection(host, port)
    decoder = FrameDecoder()
    writer.write(encode(Hello(17, 5)))
    t0 = time.perf_counter()
    offset = asked = 0
    rid = 0
    outstanding = 0
    while offset < length:
        while outstanding < 2 and asked < length:
            rid += 1
            writer.write(encode(ReadSegment(segment, asked, BLOCK, "", rid)))
            asked += BLOCK
            outstanding += 1
        data = await reader.read(1 << 20)
        if not data:
            raise ConnectionError("server closed")
        for c in decoder.feed(data):
            if isinstance(c, SegmentRead):
                outstanding -= 1
                offset += len(c.data)
                if len(c.data) < BLOCK and c.offset + len(c.data) < length:
                    asked = c.offset + len(c.data)  # short read: continue where it stopped
                    outstanding = 0
                    break
    elapsed = time.perf_counter() - t0
    writer.close()
    return elapsed


# -- measurements --------------------------------------------------------------------------


@dataclass
class Row:
    fsync: str
    size: int
    what: str
    events: int
    seconds: list[float]
    raw: float | None = None  # raw events/s (best run) to compare with

    @property
    def rate(self) -> float:
        return self.events / min(self.seconds)

    @property
    def median_rate(self) -> float:
        return self.events / statistics.median(self.seconds)

    @property
    def mbps(self) -> float:
        return self.rate * self.size / 1e6

    def line(self) -> str:
        vs = f"{100 * self.rate / self.raw:4.0f}% of raw" if self.raw else " " * 11
        return (
            f"fsync={self.fsync:<8} {self.size:>6} B  {self.what:<22} "
            f"{self.rate:>11,.0f} ev/s {self.mbps:>7.1f} MB/s  {vs}"
            f"  (median of {len(self.seconds)}: {self.median_rate:,.0f} ev/s)"
        )


def make_payloads(size: int, count: int) -> list[bytes]:
    pool = [os.urandom(size) for _ in range(min(count, 256))]
    return [pool[i % len(pool)] for i in range(count)]


def new_segment(endpoint: str) -> str:
    name = f"bench/s{uuid.uuid4().hex[:10]}/0.#epoch.0"

    async def create() -> None:
        async with sc.connect(endpoint) as c:
            await c.create_segment(name)

    run_async(create)
    return name


def run_async(coro_fn: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        return await coro_fn()

    if uvloop is not None:
        return uvloop.run(main())
    return asyncio.run(main())


async def sdk_write(endpoint: str, segment: str, payloads: list[bytes], many: bool,
                    samples: list[float] | None = None) -> float:  # fmt: skip
    async with sc.connect(endpoint) as client, client.writer(segment) as w:
        await w.start()
        every = max(1, len(payloads) // 2000)
        t0 = time.perf_counter()
        if many:
            await w.write_many(payloads)
        else:
            for i, p in enumerate(payloads):
                ack = await w.write(p)
                if samples is not None and i % every == 0:
                    ts = time.perf_counter()
                    ack.add_done_callback(lambda a, ts=ts: samples.append(time.perf_counter() - ts))
        await w.flush()
        return time.perf_counter() - t0


def sync_write(endpoint: str, segment: str, payloads: list[bytes], many: bool) -> float:
    with sync.connect(endpoint) as client, client.writer(segment) as w:
        w.start()
        t0 = time.perf_counter()
        if many:
            w.write_many(payloads)
        else:
            write = w.write
            for p in payloads:
                write(p)
        w.flush()
        return time.perf_counter() - t0


async def sdk_read(endpoint: str, segment: str, batches: bool) -> tuple[int, float]:
    async with sc.connect(endpoint) as client:
        n = 0
        t0 = time.perf_counter()
        reader = client.reader(segment)
        if batches:
            while batch := await reader.read_batch():
                n += len(batch)
        else:
            async for _ in reader:
                n += 1
        return n, time.perf_counter() - t0


def sync_read(endpoint: str, segment: str) -> tuple[int, float]:
    with sync.connect(endpoint) as client:
        t0 = time.perf_counter()
        n = sum(1 for _ in client.reader(segment))
        return n, time.perf_counter() - t0


async def idle_latency(endpoint: str, segment: str, payloads: list[bytes]) -> list[float]:
    out = []
    async with sc.connect(endpoint) as client, client.writer(segment) as w:
        await w.start()
        for p in payloads:
            t = time.perf_counter()
            await (await w.write(p))
            out.append(time.perf_counter() - t)
    return out


def segment_length(endpoint: str, segment: str) -> int:
    async def info() -> int:
        async with sc.connect(endpoint) as c:
            return (await c.segment_info(segment)).length

    return run_async(info)


def pct(xs: list[float], p: int) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return 1000 * xs[min(len(xs) - 1, int(len(xs) * p / 100))]


def settle(pid: int | None, pause: float) -> None:
    """Wait until the server has finished its background work (its CPU use drops)."""
    if pid is None:
        time.sleep(pause)
        return
    tick = os.sysconf("SC_CLK_TCK")
    deadline = time.monotonic() + 30

    def cpu() -> float:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick

    time.sleep(0.2)
    while time.monotonic() < deadline:
        before = cpu()
        time.sleep(0.25)
        if cpu() - before < 0.25 * 0.05:
            return


def bench(endpoint: str, fsync: str, sizes: list[int], scale: float, reps: int,
          pid: int | None) -> list[str]:  # fmt: skip
    out: list[str] = []
    counts = {100: 500_000, 1024: 100_000}
    for size in sizes:
        count = max(200, int(scale * counts.get(size, 100_000_000 // size)))
        payloads = make_payloads(size, count)
        rows = {
            name: Row(fsync, size, name, count, [])
            for name in (
                "raw protocol write", "sdk write()", "sdk write_many()", "sync write()",
                "sync write_many()", "raw protocol read", "sdk read_batch()", "sdk async for",
                "sync iteration",
            )
        }  # fmt: skip
        samples: list[float] = []
        last_segment = ""
        for _ in range(reps):
            for name in ("raw protocol write", "sdk write_many()", "sdk write()",
                         "sync write_many()", "sync write()"):  # fmt: skip
                seg = new_segment(endpoint)
                settle(pid, 1.0)
                if name == "raw protocol write":
                    secs = run_async(partial(raw_write, endpoint, seg, payloads))
                elif name.startswith("sdk"):
                    many = "many" in name
                    secs = run_async(
                        partial(sdk_write, endpoint, seg, payloads, many, None if many else samples)
                    )
                else:
                    secs = sync_write(endpoint, seg, payloads, "many" in name)
                rows[name].seconds.append(secs)
                last_segment = seg
        length = segment_length(endpoint, last_segment)
        for _ in range(reps):
            settle(pid, 1.0)
            rows["raw protocol read"].seconds.append(
                run_async(partial(raw_read, endpoint, last_segment, length))
            )
            for name, fn in (
                (
                    "sdk read_batch()",
                    partial(run_async, partial(sdk_read, endpoint, last_segment, True)),
                ),
                (
                    "sdk async for",
                    partial(run_async, partial(sdk_read, endpoint, last_segment, False)),
                ),
                ("sync iteration", partial(sync_read, endpoint, last_segment)),
            ):
                settle(pid, 1.0)
                n, secs = fn()
                assert n == count, (name, n, count)
                rows[name].seconds.append(secs)
        raw_w = rows["raw protocol write"].rate
        raw_r = rows["raw protocol read"].rate
        for name, row in rows.items():
            if not name.startswith("raw"):
                row.raw = raw_r if "read" in name or "for" in name or "iteration" in name else raw_w
        settle(pid, 1.0)
        idle = run_async(partial(idle_latency, endpoint, new_segment(endpoint), payloads[:300]))
        lines = [r.line() for r in rows.values()]
        lines.append(
            f"fsync={fsync:<8} {size:>6} B  ack latency, one event at a time: "
            f"p50 {pct(idle, 50):.2f} ms, p99 {pct(idle, 99):.2f} ms; during write() at full "
            f"speed: p50 {pct(samples, 50):.1f} ms, p99 {pct(samples, 99):.1f} ms"
        )
        for line in lines:
            print(line, flush=True)
        out += lines
    return out


# -- streams (issue 17): routing keys over 8 segments, a reader group of 4 ---------------


async def stream_rows(endpoints: str, count: int) -> dict[str, float]:
    """Events/s: write_many to 1 segment vs an 8-segment stream with routing keys; one
    reader on 1 segment vs a reader group of 4 on 8 segments (all in this process)."""
    endpoint, controller = endpoints.split("|")
    payloads = make_payloads(100, count)
    keys = [f"key-{i % 1000}" for i in range(count)]
    out: dict[str, float] = {}
    async with sc.connect(endpoint, controller=controller) as c:
        scope = f"b{uuid.uuid4().hex[:8]}"
        await c.create_scope(scope)
        await c.create_stream(f"{scope}/one", 1)
        await c.create_stream(f"{scope}/eight", 8)
        for name, stream, ks in (("1 segment", "one", None), ("8 segments, keys", "eight", keys)):
            async with c.stream_writer(f"{scope}/{stream}") as w:
                await w.start()
                t0 = time.perf_counter()
                for i in range(0, count, 10_000):
                    await w.write_many(
                        payloads[i : i + 10_000],
                        routing_keys=None if ks is None else ks[i : i + 10_000],
                    )
                await w.flush()
                out[f"stream write_many() {name}"] = count / (time.perf_counter() - t0)
        for name, stream, readers in (("1 reader, 1 segment", "one", 1),
                                      ("group of 4, 8 segments", "eight", 4)):  # fmt: skip
            group = await c.reader_group(f"{scope}/g-{stream}", [f"{scope}/{stream}"])
            members = [await group.reader(f"r{i}").join() for i in range(readers)]
            got = [0] * readers
            last = [0.0]

            async def drain(
                i: int, r: GroupReader, got: list[int] = got, last: list[float] = last
            ) -> None:
                async for _ev in r.events(idle_timeout=1.0):
                    got[i] += 1
                    last[0] = time.perf_counter()

            t0 = time.perf_counter()
            await asyncio.gather(*(drain(i, r) for i, r in enumerate(members)))
            secs = last[0] - t0  # to the last event (the idle timeout that ends them excluded)
            assert sum(got) == count, (name, sum(got), count)
            out[f"read {name}"] = count / secs
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--endpoint", help="use a running server instead of starting one")
    ap.add_argument("--fsync", default="always", help="fsync modes to start servers with")
    ap.add_argument("--fsync-label", default="?", help="fsync mode of --endpoint's server")
    ap.add_argument("--sizes", default="100,1024,65536")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply event counts")
    ap.add_argument("--reps", type=int, default=3, help="runs per case (best is reported)")
    ap.add_argument("--streams", type=int, default=0,
                    help="also run the stream rows with this many 100 B events")  # fmt: skip
    args = ap.parse_args()
    if args.streams:
        for mode in args.fsync.split(","):
            with server(mode, controller=True) as (endpoints, _pid):
                rows = run_async(partial(stream_rows, endpoints, args.streams))
            for name, rate in rows.items():
                print(f"fsync={mode:<8} 100 B  {name:<36} {rate:>12,.0f} events/s")
            w1, w8 = (
                rows["stream write_many() 1 segment"],
                rows["stream write_many() 8 segments, keys"],
            )
            r1, r4 = rows["read 1 reader, 1 segment"], rows["read group of 4, 8 segments"]
            print(
                f"ratios: write 8 keyed / 1 = {w8 / w1:.2f}, group of 4 / 1 reader = {r4 / r1:.2f}"
            )
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    print(
        f"python {sys.version.split()[0]}, loop={'uvloop' if uvloop else 'asyncio'}, "
        f"cpus={os.cpu_count()}, load average {os.getloadavg()[0]:.2f}, "
        f"block={BLOCK} B, bound={BOUND} B",
        flush=True,
    )
    lines: list[str] = []
    if args.endpoint:
        lines += bench(args.endpoint, args.fsync_label, sizes, args.scale, args.reps, None)
    else:
        for mode in args.fsync.split(","):
            with server(mode) as (endpoint, pid):
                lines += bench(endpoint, mode, sizes, args.scale, args.reps, pid)
    print("\nsummary (best of --reps runs; raw = pre-framed events on a bare socket)")
    for line in lines:
        print(line)


if __name__ == "__main__":
    main()
