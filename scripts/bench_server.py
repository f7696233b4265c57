#!/usr/bin/env python3
"""End-to-end benchmark of the segment store server over loopback TCP.

Starts its own ``segmentstore serve`` subprocess (127.0.0.1, ephemeral port, temp data dir)
per fsync mode and drives it from an asyncio (uvloop) raw-socket client with pre-built,
pipelined AppendBlockEnd frames. Measures, in one run:

* appends: events/s, MB/s and ack latency p50/p99 for 100 B, 1 KiB and 64 KiB events, to one
  segment (one writer, one connection) and to 100 segments (100 writers on 4 connections),
  with fsync=always (the default: acked after fdatasync) and fsync=interval / fsync=never
  (labelled: acks come before the disk has the data);
* catch-up reads: MB/s reading a large segment from offset 0 (2 MiB ReadSegments, pipelined
  and one at a time);
* tail latency (fsync=never): an event is appended while a reader has a ReadSegment parked
  at the tail; p50/p99 of append sent -> reader has it, and of writer's ack -> reader has it;
* the comparison limits, measured in the same run: the disk's rate for 1 MiB writes each
  followed by fdatasync (in the data dir's filesystem), its rate for data going into blocks
  never written before (4 MiB O_DIRECT writes extending a new file: where chunk files, and
  anything a store keeps, must end up), what a plain uvloop socket pair
  moves over loopback (a trivial server in another process that discards, or sends), and
  the "python floor": what a trivial, protocol-free uvloop server moves from a socket into a
  preallocated file (one writer thread, pwritev of what has accumulated, fdatasync after
  each batch or none), with 64 KiB-event-sized blocks;
* catch-up reads again after a restart of the server (cold: its read cache is empty);
* each server is warmed up before its runs (``warm_up``: a read cache's worth of data is
  written and deleted), so every run sees the steady state of a long-running server;
* the ratios against the targets, and the CPU used by the server and by this client (if
  the client is near 100% of a core, it may be the bottleneck: the report says so).

``--profile FILE`` runs the server under cProfile for a short mixed workload and prints the
top functions. Example::

    .venv/bin/python scripts/bench_server.py --quick
    .venv/bin/python scripts/bench_server.py --json bench.json
    .venv/bin/python scripts/bench_server.py --quick --modes never --sizes 65536

On a VM with free page reporting (e.g. Firecracker), every 4 KiB page of new page cache or
anonymous memory costs a host page fault: the disk's "preallocated" reference and the
python floor's file rewrite pages already cached, as the server's preallocated log does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import mmap
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from segmentstore_client.protocol import (
    AppendSetup,
    Command,
    CreateSegment,
    DataAppended,
    DeleteSegment,
    FrameDecoder,
    Hello,
    ReadSegment,
    SegmentCreated,
    SegmentRead,
    SetupAppend,
    encode,
    frame_events,
)

from segmentstore.server.launcher import ServerProcess

CACHE = re.compile(r"read cache (\d+) MiB")
HEAD = struct.Struct(">ii")
ABE_HEAD = struct.Struct(">ii16sii")  # type, length, writerId, sizeOfWholeEvents, data length
ABE_TAIL = struct.Struct(">iqq")  # numEvents, lastEventNumber, requestId
TARGET_BLOCK_BYTES = 512 * 1024  # about the Java client's largest block (523 264 bytes)
MAX_EVENTS_PER_BLOCK = 500  # the Rust client's batch limit
CLK_TCK = os.sysconf("SC_CLK_TCK")

TARGETS = {
    "events_100b_fsync_always_per_s": 500_000,
    "append_64k_fsync_always_vs_disk": 0.70,
    "append_64k_fsync_never_vs_loopback": 0.40,
    "catchup_read_vs_loopback": 0.50,
    "tail_latency_p99_ms": 2.0,
}


def use_uvloop() -> None:
    import uvloop

    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(p / 100 * len(s)))]


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def busy_cpu_seconds() -> float:
    """CPU seconds spent by the whole machine (every core, not idle or waiting for I/O)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) / CLK_TCK


class CpuMeter:
    """CPU used by the server, by this client and by everything else during a run."""

    def __init__(self, server: ServerProc) -> None:
        self.server = server
        self.t0 = time.perf_counter()
        self.s0, self.c0, self.b0 = server.cpu(), time.process_time(), busy_cpu_seconds()

    def stop(self) -> dict[str, float]:
        elapsed = time.perf_counter() - self.t0
        s = self.server.cpu() - self.s0
        c = time.process_time() - self.c0
        b = busy_cpu_seconds() - self.b0
        return {
            "elapsed": elapsed,
            "server_cpu": s / elapsed,
            "client_cpu": c / elapsed,
            "others_cpu": max(0.0, b - s - c) / elapsed,
        }


# --- the server under test -----------------------------------------------------------------


class ServerProc:
    """The server under test, started by the shared launcher (no SEGMENTSTORE_* inherited)."""

    def __init__(self, data_dir: Path, fsync: str, profile: Path | None = None) -> None:
        self.launcher = ServerProcess(
            data_dir,
            extra_args=["--fsync", fsync],
            http_port=-1,
            command_prefix=["-m", "cProfile", "-o", str(profile)] if profile else [],
        )
        self.launcher.start()
        self.data_dir = data_dir
        self.fsync = fsync
        self.port = self.launcher.port
        self.log = self.launcher.log
        caches = [int(m.group(1)) for line in self.log if (m := CACHE.search(line))]
        self.cache_mb = caches[0] if caches else 0  # the server's read cache size

    @property
    def proc(self) -> subprocess.Popen[str]:
        assert self.launcher.proc is not None
        return self.launcher.proc

    def cpu(self) -> float:
        return cpu_seconds(self.proc.pid)

    def stop(self) -> int:
        try:
            return self.launcher.stop(60)
        except subprocess.TimeoutExpired:
            return self.proc.wait(10)


# --- a lean client ---------------------------------------------------------------------------


class Conn(asyncio.Protocol):
    """One connection: replies by request id, DataAppended and SegmentRead to callbacks."""

    def __init__(self) -> None:
        self.decoder = FrameDecoder()
        self.transport: asyncio.Transport | None = None
        self.waiters: dict[int, asyncio.Future[Command]] = {}
        self.hello: asyncio.Future[Command] = asyncio.get_running_loop().create_future()
        self.on_ack: dict[uuid.UUID, Callable[[DataAppended], None]] = {}
        self.on_read: Callable[[SegmentRead], None] | None = None
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    @classmethod
    async def open(cls, port: int) -> Conn:
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(cls, "127.0.0.1", port)
        conn.send(Hello(17, 5))
        await asyncio.wait_for(conn.hello, 10)
        return conn

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports quack like asyncio.Transport without subclassing it.
        self.transport = transport = cast(asyncio.Transport, transport)
        transport.set_write_buffer_limits(high=256 * 1024 * 1024)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)
        for fut in self.waiters.values():
            if not fut.done():
                fut.set_exception(ConnectionError("connection lost"))

    def data_received(self, data: bytes) -> None:
        for cmd in self.decoder.feed(data):
            if type(cmd) is DataAppended:
                self.on_ack[cmd.writer_id](cmd)
            elif type(cmd) is SegmentRead:
                if self.on_read is not None:
                    self.on_read(cmd)
            elif type(cmd) is Hello:
                self.hello.set_result(cmd)
            else:
                request_id = getattr(cmd, "request_id", None)
                fut = self.waiters.pop(request_id, None) if isinstance(request_id, int) else None
                if fut is not None and not fut.done():
                    fut.set_result(cmd)

    def send(self, cmd: Command) -> None:
        assert self.transport is not None
        self.transport.write(encode(cmd))

    async def request(self, cmd: Command, rid: int) -> Command:
        fut: asyncio.Future[Command] = asyncio.get_running_loop().create_future()
        self.waiters[rid] = fut
        self.send(cmd)
        return await asyncio.wait_for(fut, 30)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


_rid = 0


def rid() -> int:
    global _rid
    _rid += 1
    return _rid


async def create(conn: Conn, name: str) -> None:
    r = rid()
    reply = await conn.request(CreateSegment(r, name), r)
    assert isinstance(reply, SegmentCreated), reply


async def setup(conn: Conn, w: uuid.UUID, name: str) -> int:
    r = rid()
    reply = await conn.request(SetupAppend(r, w, name, ""), r)
    assert isinstance(reply, AppendSetup), reply
    return reply.last_event_number


class Window:
    """The blocks in flight on one connection, shared round-robin by its writers."""

    def __init__(self, conn: Conn, limit: int) -> None:
        self.conn = conn
        self.limit = limit
        self.in_flight = 0
        self.ready: deque[Writer] = deque()

    def pump(self) -> None:
        transport = self.conn.transport
        assert transport is not None
        batch: list[bytes] = []
        now = time.perf_counter()
        ready = self.ready
        while self.in_flight < self.limit and ready:
            w = ready.popleft()
            if not w.sending:
                w.queued = False
                continue
            w.add_block(batch, now)
            self.in_flight += 1
            ready.append(w)
        if batch:
            transport.writelines(batch)


@dataclass
class Writer:
    """One writer sending pre-built AppendBlockEnd blocks through its connection's window."""

    window: Window
    writer_id: uuid.UUID
    records: bytes
    events_per_block: int
    sent: int = 0
    acked: int = 0
    sending: bool = True
    queued: bool = False
    measuring: bool = False
    measured_blocks: int = 0
    latencies: list[float] = field(default_factory=list)
    sent_at: deque[float] = field(default_factory=deque)
    idle: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        n = len(self.records)
        self._head = ABE_HEAD.pack(4, 16 + 4 + 4 + n + 20, self.writer_id.bytes, n, n)
        self.window.conn.on_ack[self.writer_id] = self.ack

    def start(self) -> None:
        if not self.queued:
            self.queued = True
            self.window.ready.append(self)
        self.window.pump()

    def add_block(self, batch: list[bytes], now: float) -> None:
        k = self.events_per_block
        self.sent += 1
        batch += (self._head, self.records, ABE_TAIL.pack(k, self.sent * k, self.sent))
        self.sent_at.append(now)

    def ack(self, cmd: DataAppended) -> None:
        blocks = cmd.event_number // self.events_per_block - self.acked
        now = time.perf_counter()
        for _ in range(blocks):
            t = self.sent_at.popleft()
            if self.measuring:
                self.latencies.append(now - t)
                self.measured_blocks += 1
        self.acked += blocks
        self.window.in_flight -= blocks
        if self.sending:
            self.start()
        else:
            self.window.pump()
            if self.acked == self.sent:
                self.idle.set()


def window_blocks(block_bytes: int, inflight_bytes: int, max_depth: int) -> int:
    return min(max_depth, max(2, inflight_bytes // block_bytes))


async def append_run(
    server: ServerProc,
    size: int,
    segments: int,
    connections: int,
    depth: int,
    duration: float,
    warmup: float,
    events_per_block: int | None = None,
    inflight_bytes: int = 8 << 20,
) -> dict[str, Any]:
    """``depth`` caps the blocks in flight per connection; so does ``inflight_bytes``."""
    k = events_per_block or max(1, min(MAX_EVENTS_PER_BLOCK, TARGET_BLOCK_BYTES // (size + 8)))
    records = frame_events([os.urandom(size)] * k)
    conns = [await Conn.open(server.port) for _ in range(connections)]
    limit = window_blocks(len(records) + 60, inflight_bytes, depth)
    windows = [Window(c, limit) for c in conns]
    tag = uuid.uuid4().hex[:8]
    writers: list[Writer] = []
    for i in range(segments):
        name = f"bench{tag}/s{size}/{i}.#epoch.0"
        conn = conns[i % connections]
        await create(conn, name)
        wid = uuid.uuid4()
        await setup(conn, wid, name)
        writers.append(Writer(windows[i % connections], wid, records, k))
    for w in writers:
        w.start()
    await asyncio.sleep(warmup)
    for w in writers:
        w.measuring = True
    meter = CpuMeter(server)
    await asyncio.sleep(duration)
    for w in writers:
        w.measuring = False
    cpu = meter.stop()
    for w in writers:
        w.sending = False
        if w.acked == w.sent:
            w.idle.set()
    await asyncio.wait_for(asyncio.gather(*(w.idle.wait() for w in writers)), 120)
    for c in conns:
        c.close()
    elapsed = cpu["elapsed"]
    blocks = sum(w.measured_blocks for w in writers)
    events = blocks * k
    lat = [x for w in writers for x in w.latencies]
    return {
        "event_bytes": size,
        "segments": segments,
        "connections": connections,
        "events_per_block": k,
        "blocks_in_flight": limit * connections,
        "events_per_s": events / elapsed,
        "mb_per_s": events * size / elapsed / 1e6,
        "wire_mb_per_s": blocks * (len(records) + 52) / elapsed / 1e6,
        "ack_p50_ms": pct(lat, 50) * 1000,
        "ack_p99_ms": pct(lat, 99) * 1000,
        "server_cpu": cpu["server_cpu"],
        "client_cpu": cpu["client_cpu"],
        "others_cpu": cpu["others_cpu"],
    }


async def fill_segment(server: ServerProc, name: str, total: int) -> None:
    conn = await Conn.open(server.port)
    await create(conn, name)
    w = uuid.uuid4()
    await setup(conn, w, name)
    size = 64 * 1024
    k = TARGET_BLOCK_BYTES // (size + 8)
    writer = Writer(Window(conn, 16), w, frame_events([os.urandom(size)] * k), k)
    blocks = total // len(writer.records) + 1
    done = asyncio.Event()
    inner = writer.ack

    def ack(cmd: DataAppended) -> None:
        inner(cmd)
        if writer.sent >= blocks:
            writer.sending = False
        if writer.acked >= blocks:
            done.set()

    conn.on_ack[w] = ack
    writer.start()
    await asyncio.wait_for(done.wait(), 600)
    conn.close()


async def warm_up(server: ServerProc) -> None:
    """Bring a new server to its steady state before measuring: write as much as its read
    cache holds to a scratch segment, then delete it. A server's first read-cache-full of
    data takes fresh memory (a page fault per 4 KiB; on a VM with free page reporting a host
    fault too), which a long-running server paid once, long ago; afterwards the cache
    recycles memory. Without this, the first runs of a mode measure that one-time cost."""
    if not server.cache_mb:
        return
    name = f"warmup{uuid.uuid4().hex[:8]}/w/0.#epoch.0"
    await fill_segment(server, name, server.cache_mb << 20)
    conn = await Conn.open(server.port)
    r = rid()
    await conn.request(DeleteSegment(r, name, ""), r)
    conn.close()


async def read_run(server: ServerProc, name: str, length: int, inflight: int) -> dict[str, Any]:
    """Read [0, length) with ``inflight`` 2 MiB ReadSegments outstanding."""
    conn = await Conn.open(server.port)
    chunk = 2 * 1024 * 1024
    next_offset = 0
    pending: dict[int, int] = {}  # offset -> requested end
    got = 0
    done = asyncio.Event()
    transport = conn.transport
    assert transport is not None

    def issue(offset: int, end: int) -> None:
        pending[offset] = end
        transport.write(encode(ReadSegment(name, offset, end - offset, "", rid())))

    def top_up() -> None:
        nonlocal next_offset
        while len(pending) < inflight and next_offset < length:
            end = min(length, next_offset + chunk)
            issue(next_offset, end)
            next_offset = end

    def on_read(r: SegmentRead) -> None:
        nonlocal got
        end = pending.pop(r.offset)
        n = len(r.data)
        got += n
        if r.offset + n < end:  # a short read: ask for the rest
            issue(r.offset + n, end)
        top_up()
        if got >= length:
            done.set()

    conn.on_read = on_read
    meter = CpuMeter(server)
    top_up()
    await asyncio.wait_for(done.wait(), 600)
    cpu = meter.stop()
    conn.close()
    return {
        "bytes": length,
        "reads_in_flight": inflight,
        "mb_per_s": length / cpu["elapsed"] / 1e6,
        "server_cpu": cpu["server_cpu"],
        "client_cpu": cpu["client_cpu"],
        "others_cpu": cpu["others_cpu"],
    }


async def tail_run(server: ServerProc, count: int) -> dict[str, Any]:
    """Append one event at a time while a ReadSegment waits at the tail."""
    name = f"tail{uuid.uuid4().hex[:8]}/st/0.#epoch.0"
    wconn, rconn = await Conn.open(server.port), await Conn.open(server.port)
    await create(wconn, name)
    w = uuid.uuid4()
    await setup(wconn, w, name)
    loop = asyncio.get_running_loop()
    record = frame_events([b"t" * 100])
    offset = 0
    acked_at: dict[int, float] = {}
    read_fut: asyncio.Future[SegmentRead] | None = None

    def on_ack(cmd: DataAppended) -> None:
        acked_at[cmd.event_number] = time.perf_counter()

    def on_read(r: SegmentRead) -> None:
        assert read_fut is not None
        read_fut.set_result(r)

    wconn.on_ack[w] = on_ack
    rconn.on_read = on_read
    assert wconn.transport is not None and rconn.transport is not None
    e2e: list[float] = []
    from_ack: list[float] = []
    for n in range(1, count + 1):
        read_fut = loop.create_future()
        rconn.transport.write(encode(ReadSegment(name, offset, 1 << 20, "", rid())))
        await asyncio.sleep(0.0005)  # let the read park at the tail
        sent = time.perf_counter()
        wconn.transport.write(
            ABE_HEAD.pack(4, 16 + 8 + len(record) + 20, w.bytes, len(record), len(record))
        )
        wconn.transport.write(record + ABE_TAIL.pack(1, n, n))
        r = await asyncio.wait_for(read_fut, 10)
        got = time.perf_counter()
        assert len(r.data) == len(record), r
        offset += len(r.data)
        e2e.append(got - sent)
        for _ in range(1000):
            if n in acked_at:
                break
            await asyncio.sleep(0)
        if n in acked_at:
            from_ack.append(got - acked_at[n])
    wconn.close()
    rconn.close()
    return {
        "events": count,
        "e2e_p50_ms": pct(e2e, 50) * 1000,
        "e2e_p99_ms": pct(e2e, 99) * 1000,
        "after_ack_p50_ms": pct(from_ack, 50) * 1000,
        "after_ack_p99_ms": pct(from_ack, 99) * 1000,
        "reader_before_ack_share": sum(1 for x in from_ack if x < 0) / max(1, len(from_ack)),
    }


# --- the comparison limits -----------------------------------------------------------------


def _rewrite_synced(fd: int, block: bytes, blocks: int, duration: float) -> int:
    """1 MiB pwrite + fdatasync, round the file's ``blocks`` MiB, for ``duration``; a count."""
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < duration:
        os.pwrite(fd, block, (n % blocks) << 20)
        os.fdatasync(fd)
        n += 1
    return n


def disk_rate(base: Path, duration: float) -> dict[str, float]:
    """MB/s of 1 MiB writes each followed by fdatasync: into a preallocated file (as the
    log does), the same from two threads into two such files at once (what the disk gives
    two streams together), and appending to a growing file."""
    block = os.urandom(1 << 20)
    out: dict[str, float] = {}
    blocks = 256
    paths = [base / "disk-rate-0.bin", base / "disk-rate-1.bin"]
    fds = []
    try:
        for path in paths:
            _zero_fill(path, blocks << 20)
            fds.append(os.open(path, os.O_RDWR))
        t0 = time.perf_counter()
        n = _rewrite_synced(fds[0], block, blocks, duration)
        out["preallocated"] = n * (1 << 20) / (time.perf_counter() - t0) / 1e6
        with ThreadPoolExecutor(2) as pool:
            t0 = time.perf_counter()
            counts = list(pool.map(lambda fd: _rewrite_synced(fd, block, blocks, duration), fds))
        out["preallocated_2_streams"] = sum(counts) * (1 << 20) / (time.perf_counter() - t0) / 1e6
    finally:
        for fd in fds:
            os.close(fd)
        for path in paths:
            path.unlink(missing_ok=True)
    path = paths[0]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < duration:
            os.write(fd, block)
            if n % blocks == blocks - 1:
                os.ftruncate(fd, 0)
                os.lseek(fd, 0, os.SEEK_SET)
            os.fdatasync(fd)
            n += 1
        out["growing"] = n * (1 << 20) / (time.perf_counter() - t0) / 1e6
    finally:
        os.close(fd)
        path.unlink()
    out["new_blocks"] = new_block_rate(base, duration)
    return out


def new_block_rate(base: Path, duration: float) -> float:
    """MB/s at which the disk takes data into blocks never written before: 4 MiB O_DIRECT
    writes (each copied into the aligned buffer first, as the chunk files are written),
    extending a new file, then one fdatasync. Whatever a store keeps must go to new blocks
    sooner or later, so this bounds sustained appends in every fsync mode. Falls back to
    buffered writes where the filesystem refuses O_DIRECT."""
    size = 4 << 20
    buf = mmap.mmap(-1, size)  # page-aligned, as O_DIRECT requires
    src = os.urandom(size)
    path = base / "new-blocks.bin"
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    try:
        fd = os.open(path, flags | getattr(os, "O_DIRECT", 0), 0o644)
    except OSError:
        fd = os.open(path, flags, 0o644)
    try:
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < duration:
            buf[:] = src
            os.pwritev(fd, [buf], n * size)
            n += 1
        os.fdatasync(fd)
        return n * size / (time.perf_counter() - t0) / 1e6
    finally:
        os.close(fd)
        buf.close()
        path.unlink()


async def _loopback_server() -> None:
    """Child process: 'S' connections are discarded, 'R' connections get bytes nonstop."""
    chunk = bytes(1 << 20)

    class P(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.t = cast(asyncio.Transport, transport)
            self.mode = b""
            self.paused = False

        def data_received(self, data: bytes) -> None:
            if not self.mode:
                self.mode = data[:1]
                if self.mode == b"R":
                    self.pump()

        def pump(self) -> None:
            while not self.paused and not self.t.is_closing():
                self.t.write(chunk)

        def pause_writing(self) -> None:
            self.paused = True

        def resume_writing(self) -> None:
            self.paused = False
            self.pump()

    loop = asyncio.get_running_loop()
    server = await loop.create_server(P, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()


async def loopback_rate(duration: float) -> dict[str, float]:
    """MB/s a trivial uvloop server moves over loopback: client -> server (discarded) and
    server -> client (read and dropped by the client). The server is another process."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "--loopback-server"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        loop = asyncio.get_running_loop()
        out: dict[str, float] = {}
        chunk = bytes(1 << 20)

        class Sink(asyncio.Protocol):  # we send
            def __init__(self) -> None:
                self.can_write = asyncio.Event()
                self.can_write.set()

            def pause_writing(self) -> None:
                self.can_write.clear()

            def resume_writing(self) -> None:
                self.can_write.set()

        t, p = await loop.create_connection(Sink, "127.0.0.1", port)
        t.write(b"S")
        sent, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < duration:
            await p.can_write.wait()
            t.write(chunk)
            sent += len(chunk)
        # Bytes still in our buffer did not move.
        moved = sent - t.get_write_buffer_size()
        out["client_to_server"] = moved / (time.perf_counter() - t0) / 1e6
        t.close()

        class Source(asyncio.Protocol):  # we receive
            n = 0

            def data_received(self, data: bytes) -> None:
                Source.n += len(data)

        t2, _ = await loop.create_connection(Source, "127.0.0.1", port)
        t2.write(b"R")
        await asyncio.sleep(0.2)
        n0, t0 = Source.n, time.perf_counter()
        await asyncio.sleep(duration)
        out["server_to_client"] = (Source.n - n0) / (time.perf_counter() - t0) / 1e6
        t2.close()
        return out
    finally:
        proc.kill()
        proc.wait()


FLOOR_FILE_BYTES = 1 << 30
FLOOR_EVENT_BYTES = 65_600  # a 64 KiB event with its framing and share of the block header
FLOOR_EVENTS_PER_BLOCK = 7  # as many as the 64 KiB append runs put in one block
IOV_MAX = 1024


def _floor_write(fd: int, bufs: list[bytes], pos: int, size: int, sync: bool) -> int:
    """Write ``bufs`` at ``pos`` of a file of ``size`` bytes, wrapping to 0 at its end (so it
    stays preallocated), at most IOV_MAX buffers per pwritev; then fdatasync if ``sync``."""
    views = deque(memoryview(b) for b in bufs)
    total = 0
    while views:
        room = size - pos
        iov: list[memoryview] = []
        n = 0
        for v in views:
            if len(iov) == IOV_MAX or n == room:
                break
            take = min(len(v), room - n)
            iov.append(v if take == len(v) else v[:take])
            n += take
        w = os.pwritev(fd, iov, pos)
        total += w
        pos = (pos + w) % size
        while w:  # drop what was written (a short write leaves the rest for the next call)
            v = views[0]
            if len(v) <= w:
                views.popleft()
                w -= len(v)
            else:
                views[0] = v[w:]
                w = 0
    if sync:
        os.fdatasync(fd)
    return total


async def _floor_server(path: str, mode: str) -> None:
    """Child process: accepts connections; what arrives is kept as a list of ``bytes`` and one
    worker thread writes everything accumulated so far into the preallocated file at
    ``path`` (then fdatasync with mode 'always'), while the next batch accumulates; after each
    batch, the count of bytes written so far goes back (8 bytes, little-endian)."""
    fd = os.open(path, os.O_WRONLY)
    size = os.fstat(fd).st_size
    sync = mode == "always"
    pool = ThreadPoolExecutor(1)
    loop = asyncio.get_running_loop()
    pos = 0  # where the next batch goes, shared by the connections (one in practice)

    class P(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.t = cast(asyncio.Transport, transport)
            self.pending: list[bytes] = []
            self.writing = False
            self.written = 0

        def data_received(self, data: bytes) -> None:
            self.pending.append(data)
            if not self.writing:
                self.flush()

        def flush(self) -> None:
            nonlocal pos
            batch, self.pending = self.pending, []
            self.writing = True
            start = pos
            pos = (pos + sum(len(b) for b in batch)) % size
            fut = loop.run_in_executor(pool, _floor_write, fd, batch, start, size, sync)
            fut.add_done_callback(self.done)

        def done(self, fut: asyncio.Future[int]) -> None:
            self.written += fut.result()
            self.writing = False
            if not self.t.is_closing():
                self.t.write(self.written.to_bytes(8, "little"))
            if self.pending:
                self.flush()

    server = await loop.create_server(P, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()


def _zero_fill(path: Path, size: int) -> None:
    zeros = bytes(1 << 20)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.posix_fallocate(fd, 0, size)
        for pos in range(0, size, len(zeros)):
            os.pwrite(fd, zeros, pos)
        os.fsync(fd)
    finally:
        os.close(fd)


async def python_floor(
    base: Path, duration: float, warmup: float, inflight_bytes: int, depth: int
) -> dict[str, float]:
    """MB/s a trivial, protocol-free uvloop server (another process) moves from one socket
    into a preallocated file, blocks of 7 x 65,600 bytes with as many bytes in flight as the
    64 KiB append runs, with fdatasync after each write batch ('always') and without
    ('never'). The file is zero-filled once, so every run rewrites cached pages, as the
    server's log does."""
    path = base / "python-floor.bin"
    blocks = [os.urandom(FLOOR_EVENT_BYTES) for _ in range(FLOOR_EVENTS_PER_BLOCK)]
    block_bytes = FLOOR_EVENT_BYTES * FLOOR_EVENTS_PER_BLOCK
    limit = window_blocks(block_bytes + 60, inflight_bytes, depth) * block_bytes
    loop = asyncio.get_running_loop()
    out: dict[str, float] = {}
    try:
        await loop.run_in_executor(None, _zero_fill, path, FLOOR_FILE_BYTES)
        for mode in ("always", "never"):
            proc = subprocess.Popen(
                [sys.executable, __file__, "--floor-server", mode, "--floor-file", str(path)],
                stdout=subprocess.PIPE,
                text=True,
            )
            try:
                assert proc.stdout is not None
                port = int(proc.stdout.readline())

                class Client(asyncio.Protocol):
                    def __init__(self) -> None:
                        self.buf = b""
                        self.acked = 0
                        self.sent = 0
                        self.t: asyncio.Transport | None = None

                    def connection_made(self, transport: asyncio.BaseTransport) -> None:
                        self.t = cast(asyncio.Transport, transport)
                        self.t.set_write_buffer_limits(high=256 * 1024 * 1024)
                        self.pump()

                    def pump(self) -> None:
                        assert self.t is not None
                        while self.sent - self.acked + block_bytes <= limit:
                            self.t.writelines(blocks)
                            self.sent += block_bytes

                    def data_received(self, data: bytes) -> None:
                        self.buf += data
                        n = len(self.buf) // 8 * 8
                        if n:
                            self.acked = int.from_bytes(self.buf[n - 8 : n], "little")
                            self.buf = self.buf[n:]
                            self.pump()

                t, c = await loop.create_connection(Client, "127.0.0.1", port)
                await asyncio.sleep(warmup)
                a0, t0 = c.acked, time.perf_counter()
                await asyncio.sleep(duration)
                out[mode] = (c.acked - a0) / (time.perf_counter() - t0) / 1e6
                t.close()
            finally:
                proc.kill()
                proc.wait()
    finally:
        path.unlink(missing_ok=True)
    return out


# --- driver ---------------------------------------------------------------------------------


def fmt_append(r: dict[str, Any]) -> str:
    return (
        f"  {r['event_bytes']:>6} B x{r['events_per_block']:>3}/block  {r['segments']:>3} seg "
        f"{r['connections']} conn {r['blocks_in_flight']:>3} in flight  {r['events_per_s']:>11,.0f} ev/s {r['mb_per_s']:>8.1f} MB/s  "
        f"ack p50 {r['ack_p50_ms']:6.2f} ms p99 {r['ack_p99_ms']:7.2f} ms  "
        f"cpu server {r['server_cpu']:4.0%} client {r['client_cpu']:4.0%} "
        f"others {r['others_cpu']:4.0%}"
    )


async def run_all(args: argparse.Namespace, base: Path) -> dict[str, Any]:
    results: dict[str, Any] = {"python": sys.version.split()[0], "cpus": os.cpu_count()}
    duration = 1.0 if args.quick else args.duration
    warmup = 0.3 if args.quick else 1.0

    print("limits")
    disk = disk_rate(base, 1.0 if args.quick else 3.0)
    results["disk_1mib_fdatasync_mb_per_s"] = disk
    print(
        f"  disk, 1 MiB write + fdatasync: preallocated {disk['preallocated']:.0f} MB/s, growing file {disk['growing']:.0f} MB/s"
    )
    # A store writes each appended byte twice: once into the log (recycled, written-before
    # blocks; one fdatasync per group commit) and once into a chunk file (new blocks). If
    # the disk does one after the other, appends cannot outrun this.
    both = 1 / (1 / disk["preallocated"] + 1 / disk["new_blocks"])
    disk["log_plus_chunk"] = both
    print(
        f"  disk, new blocks (4 MiB O_DIRECT, a new file): {disk['new_blocks']:.0f} MB/s; "
        f"log + chunk file for each byte, one after the other: {both:.0f} MB/s"
    )
    # Even if both writes went to written-before blocks and overlapped perfectly, each byte
    # twice cannot pass half of what two streams move together.
    twice = disk["preallocated_2_streams"] / 2
    disk["twice_best_case"] = twice
    print(
        f"  disk, two 1 MiB + fdatasync streams at once (preallocated files): "
        f"{disk['preallocated_2_streams']:.0f} MB/s; each byte written twice, at best: "
        f"{twice:.0f} MB/s = {twice / disk['preallocated']:.0%} of one stream"
    )
    lo = await loopback_rate(1.0 if args.quick else 3.0)
    results["loopback_mb_per_s"] = lo
    print(
        f"  loopback uvloop socket: client->server {lo['client_to_server']:.0f} MB/s, server->client {lo['server_to_client']:.0f} MB/s"
    )
    floor = await python_floor(base, duration, warmup, args.inflight_mb << 20, args.depth)
    results["python_floor_mb_per_s"] = floor
    print(
        f"  python floor (socket -> preallocated file, no protocol): fsync=always {floor['always']:.0f} MB/s, never {floor['never']:.0f} MB/s"
    )

    appends: list[dict[str, Any]] = []
    results["appends"] = appends
    modes = args.modes or (["always", "never"] if args.quick else ["always", "interval", "never"])
    for mode in modes:
        data_dir = Path(tempfile.mkdtemp(prefix=f"server-{mode}-", dir=base))
        server = ServerProc(data_dir, mode)
        label = "" if mode == "always" else "  (acks before fdatasync: not durable on power loss)"
        print(f"\nappends, fsync={mode}{label}")
        try:
            await warm_up(server)
            print(f"  (warmed up first: {server.cache_mb} MiB, the server's read cache size)")
            for size in args.sizes:
                for segments, connections in ((1, 1), (100, 4)):
                    r = await append_run(
                        server,
                        size,
                        segments,
                        connections,
                        args.depth,
                        duration,
                        warmup,
                        inflight_bytes=args.inflight_mb << 20,
                    )
                    r["fsync"] = mode
                    appends.append(r)
                    print(fmt_append(r))
            # Round trip of one small append with nothing else going on (the official
            # client's pattern: one block in flight per writer).
            r = await append_run(server, 100, 1, 1, 1, duration, warmup, events_per_block=1)
            r["fsync"] = mode
            r["kind"] = "one event in flight"
            appends.append(r)
            print(fmt_append(r) + "  <- 1 event per block, 1 in flight")
            if mode == "never":
                name = f"catchup{uuid.uuid4().hex[:8]}/st/0.#epoch.0"
                total = (128 if args.quick else args.read_mb) * 1024 * 1024
                await fill_segment(server, name, total)
                print(f"\ncatch-up reads of a {total >> 20} MiB segment (fsync=never server)")
                reads: list[dict[str, Any]] = []
                for inflight in (8, 1):
                    r = await read_run(server, name, total, inflight)
                    reads.append(r)
                    print(
                        f"  {inflight} x 2 MiB reads in flight: {r['mb_per_s']:.0f} MB/s  "
                        f"cpu server {r['server_cpu']:.0%} client {r['client_cpu']:.0%} "
                        f"others {r['others_cpu']:.0%}"
                    )
                results["catchup_reads"] = reads
                # The same segment after a restart: the new server's read cache is empty,
                # so the reads come from the chunk files (through the OS page cache).
                code = server.stop()
                if code != 0:
                    print(f"  (server exited with {code})")
                t0 = time.perf_counter()
                server = ServerProc(data_dir, mode)
                restart = time.perf_counter() - t0
                r = await read_run(server, name, total, 8)
                r["restart_s"] = restart
                results["catchup_reads_cold"] = r
                print(
                    f"  after a restart (cold: from chunk files, not the read cache), 8 x 2 MiB in flight: {r['mb_per_s']:.0f} MB/s  "
                    f"cpu server {r['server_cpu']:.0%} client {r['client_cpu']:.0%} "
                    f"others {r['others_cpu']:.0%}  (restart took {restart:.1f} s)"
                )
                r = await tail_run(server, 300 if args.quick else 2000)
                results["tail_latency"] = r
                print(
                    f"\ntail latency, fsync=never ({r['events']} events of 100 B, one at a time):\n"
                    f"  append sent -> tail reader has it: p50 {r['e2e_p50_ms']:.3f} ms, p99 {r['e2e_p99_ms']:.3f} ms\n"
                    f"  writer's ack -> tail reader has it: p50 {r['after_ack_p50_ms']:.3f} ms, "
                    f"p99 {r['after_ack_p99_ms']:.3f} ms"
                )
        finally:
            code = server.stop()
            if code != 0:
                print(f"  (server exited with {code})")
            shutil.rmtree(data_dir, ignore_errors=True)

    # Ratios against the targets (those whose runs were skipped are left out).
    def find(mode: str, size: int, segments: int) -> dict[str, Any] | None:
        return next(
            (
                r
                for r in appends
                if (r["fsync"], r["event_bytes"], r["segments"]) == (mode, size, segments)
                and "kind" not in r
            ),
            None,
        )

    a100 = find("always", 100, 1)
    a64 = find("always", 65536, 1)
    n64 = find("never", 65536, 1)
    reads = results.get("catchup_reads", [])
    cold: dict[str, Any] | None = results.get("catchup_reads_cold")
    tail: dict[str, Any] | None = results.get("tail_latency")
    ratios: dict[str, float] = {}
    lines: list[str] = []
    skipped: list[str] = []
    if a100 is not None:
        ratios["events_100b_fsync_always_per_s"] = (
            a100["events_per_s"] / TARGETS["events_100b_fsync_always_per_s"]
        )
        lines.append(
            f"  100 B, 1 conn, fsync=always: {a100['events_per_s']:,.0f} ev/s vs 500,000: {ratios['events_100b_fsync_always_per_s']:.2f}"
        )
    else:
        skipped.append("100 B fsync=always")
    for mode, row, key, ref, ref_name in (
        ("always", a64, "append_64k_fsync_always_vs_disk", disk["preallocated"], "disk"),
        ("never", n64, "append_64k_fsync_never_vs_loopback", lo["client_to_server"], "loopback"),
    ):
        if row is None:
            skipped.append(f"64 KiB fsync={mode}")
            continue
        share = row["mb_per_s"] / ref
        ratios[key] = share / TARGETS[key]
        lines.append(
            f"  64 KiB fsync={mode}: {row['mb_per_s']:.0f} MB/s = {share:.0%} of {ref_name} "
            f"(target {TARGETS[key]:.0%}): {ratios[key]:.2f}"
        )
        lines.append(
            f"   (= {row['mb_per_s'] / floor[mode]:.0%} of the python floor for the same mode; "
            f"{row['mb_per_s'] / disk['new_blocks']:.0%} of the disk's new-block rate"
            + (
                f", {row['mb_per_s'] / disk['log_plus_chunk']:.0%} of log + chunk; writing each "
                f"byte twice allows at most {disk['twice_best_case'] / ref:.0%} of {ref_name})"
                if mode == "always"
                else ")"
            )
        )
    if reads:
        best_read = max(reads, key=lambda r: r["mb_per_s"])
        ratios["catchup_read_vs_loopback"] = (
            best_read["mb_per_s"] / lo["server_to_client"] / TARGETS["catchup_read_vs_loopback"]
        )
        lines.append(
            f"  catch-up reads: {best_read['mb_per_s']:.0f} MB/s ({best_read['reads_in_flight']} in flight) = {best_read['mb_per_s'] / lo['server_to_client']:.0%} of loopback (target 50%): {ratios['catchup_read_vs_loopback']:.2f}"
        )
    else:
        skipped.append("catch-up reads")
    if cold is not None:
        lines.append(
            f"   (after a restart, cold: {cold['mb_per_s']:.0f} MB/s = {cold['mb_per_s'] / lo['server_to_client']:.0%} of loopback; informational, the target uses the warm runs)"
        )
    if tail is not None:
        ratios["tail_latency_p99_ms"] = TARGETS["tail_latency_p99_ms"] / tail["e2e_p99_ms"]
        lines.append(
            f"  tail latency p99 (fsync=never): {tail['e2e_p99_ms']:.3f} ms (target < 2 ms): {ratios['tail_latency_p99_ms']:.2f}"
        )
    else:
        skipped.append("tail latency")
    results["targets"] = TARGETS
    results["target_ratios"] = ratios
    print("\nagainst the targets (>= 1.00 means met)")
    print("\n".join(lines))
    if skipped:
        print(f"  (not run, so not compared: {', '.join(skipped)})")
    noisy = [r for r in [*appends, *reads, *([cold] if cold else [])] if r["others_cpu"] > 0.25]
    if noisy:
        print(
            f"\nnote: other processes used > 25% of a core during {len(noisy)} run(s) "
            "(column 'others'): those figures are low by an unknown amount."
        )
    busy = [r for r in appends if r["client_cpu"] > 0.85]
    if busy:
        print(
            f"\nnote: the client used > 85% of a core in {len(busy)} append run(s); there the "
            "client may be the bottleneck (server CPU is shown next to it)."
        )
    return results


async def profile(args: argparse.Namespace, base: Path) -> None:
    """Run a short mixed workload against one server under cProfile (Python functions of
    the event-loop thread) and, with ``--perf``, under ``perf record`` too (C code, kernel,
    every thread: copies, syscalls, crc), then print the top entries of each."""
    out = Path(args.profile).resolve()
    data_dir = Path(tempfile.mkdtemp(prefix="server-profile-", dir=base))
    server = ServerProc(data_dir, args.profile_fsync, profile=out)
    perf: subprocess.Popen[bytes] | None = None
    perf_data = out.with_suffix(".perf.data")
    if args.perf:
        perf = subprocess.Popen(
            ["perf", "record", "-F", "999", "-g", "-o", str(perf_data), "-p", str(server.proc.pid)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    try:
        for size in (100, 64 * 1024):
            r = await append_run(
                server,
                size,
                1,
                1,
                args.depth,
                args.duration,
                0.5,
                inflight_bytes=args.inflight_mb << 20,
            )
            print(fmt_append(r))
        name = f"catchup{uuid.uuid4().hex[:8]}/st/0.#epoch.0"
        await fill_segment(server, name, 64 << 20)
        r = await read_run(server, name, 64 << 20, 8)
        print(f"  reads: {r['mb_per_s']:.0f} MB/s")
    finally:
        if perf is not None:
            perf.send_signal(signal.SIGINT)
            perf.wait(60)
        server.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    import pstats

    stats = pstats.Stats(str(out))
    stats.sort_stats("tottime").print_stats(args.profile_top)
    if perf is not None:
        report = subprocess.run(
            [
                *("perf", "report", "-i", str(perf_data), "--no-children", "--sort", "dso,sym"),
                *("--stdio", "-g", "none", "--percent-limit", "0.5"),
            ],
            capture_output=True,
            text=True,
        )
        lines = [ln for ln in report.stdout.splitlines() if ln.strip() and not ln.startswith("#")]
        print("perf, whole server process (all threads), by symbol:")
        print("\n".join(lines[: args.profile_top]))


def int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of integers: {text!r}"
        ) from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"need positive sizes: {text!r}")
    return values


def mode_list(text: str) -> list[str]:
    values = [x.strip() for x in text.split(",") if x.strip()]
    bad = [v for v in values if v not in ("always", "interval", "never")]
    if not values or bad:
        raise argparse.ArgumentTypeError(f"modes are always, interval, never: {text!r}")
    return values


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="short runs, fsync always and never only")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON ('-' = stdout)")
    p.add_argument("--duration", type=float, default=3.0, help="seconds measured per append run")
    p.add_argument("--depth", type=int, default=64, help="most blocks in flight per connection")
    p.add_argument(
        "--inflight-mb",
        type=int,
        default=8,
        help="and at most this many MiB in flight per connection",
    )
    p.add_argument("--read-mb", type=int, default=512, help="size of the catch-up read segment")
    p.add_argument("--dir", type=Path, help="where the data dirs go (default: system temp)")
    p.add_argument("--profile", metavar="FILE", help="run the server under cProfile, print top")
    p.add_argument("--profile-fsync", default="always", choices=("always", "interval", "never"))
    p.add_argument("--profile-top", type=int, default=30)
    p.add_argument("--perf", action="store_true", help="with --profile: also perf record")
    p.add_argument(
        "--sizes",
        type=int_list,
        default=[100, 1024, 64 * 1024],
        help="comma-separated event sizes of the append runs (default: 100,1024,65536)",
    )
    p.add_argument(
        "--modes",
        type=mode_list,
        help="comma-separated fsync modes (default: always,interval,never; always,never with "
        "--quick); catch-up reads and tail latency run only with 'never'",
    )
    p.add_argument("--loopback-server", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--floor-server", choices=("always", "never"), help=argparse.SUPPRESS)
    p.add_argument("--floor-file", help=argparse.SUPPRESS)
    args = p.parse_args()
    use_uvloop()
    if args.loopback_server:
        asyncio.run(_loopback_server())
        return 0
    if args.floor_server:
        asyncio.run(_floor_server(args.floor_file, args.floor_server))
        return 0
    base = Path(tempfile.mkdtemp(prefix="bench-server-", dir=args.dir))
    try:
        if args.profile:
            asyncio.run(profile(args, base))
            return 0
        results = asyncio.run(run_all(args, base))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if args.json:
        text = json.dumps(results, indent=2)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
