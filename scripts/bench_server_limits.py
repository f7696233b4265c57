"""The server benchmark's comparison limits, measured in the same run: the disk's rate
(rewritten and new blocks), loopback TCP, and the protocol-free "python floor" (see
``bench_server.py``)."""

from __future__ import annotations

import asyncio
import mmap
import os
import subprocess
import sys
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import cast

from bench_server_wire import window_blocks

# --- the comparison limits -----------------------------------------------------------------

# The helper servers run as `bench_server.py --loopback-server` / `--floor-server`.
BENCH_SERVER = Path(__file__).with_name("bench_server.py")


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
        [sys.executable, str(BENCH_SERVER), "--loopback-server"], stdout=subprocess.PIPE, text=True
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
                [
                    sys.executable,
                    str(BENCH_SERVER),
                    "--floor-server",
                    mode,
                    "--floor-file",
                    str(path),
                ],
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
