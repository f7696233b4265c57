"""The server benchmark's parts that talk to the server: the server under test, a lean
raw-protocol client with pre-built, pipelined AppendBlockEnd blocks, and the append,
read and tail workloads (see ``bench_server.py``)."""

from __future__ import annotations

import asyncio
import os
import re
import struct
import subprocess
import time
import uuid
from collections import deque
from collections.abc import Callable
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
    append_block_end_parts,
    encode,
    frame_events,
)

from segmentstore.server.launcher import ServerProcess

CACHE = re.compile(r"read cache (\d+) MiB")
HEAD = struct.Struct(">ii")
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
        self._wid = self.writer_id.bytes
        self._head, _ = append_block_end_parts(self.writer_id, n, 0, 0, 0)
        self.window.conn.on_ack[self.writer_id] = self.ack

    def start(self) -> None:
        if not self.queued:
            self.queued = True
            self.window.ready.append(self)
        self.window.pump()

    def add_block(self, batch: list[bytes], now: float) -> None:
        k = self.events_per_block
        self.sent += 1
        _, tail = append_block_end_parts(self._wid, len(self.records), k, self.sent * k, self.sent)
        batch += (self._head, self.records, tail)
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
        head, tail = append_block_end_parts(w, len(record), 1, n, n)
        wconn.transport.writelines((head, record, tail))
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
