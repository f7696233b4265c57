"""An in-memory server harness (h11's ConnectionPair idea): the server's real
``Connection`` and ``Server`` over a real store on a temp dir, driven through a fake
transport, with an injected clock. Flow control, pause/resume, acknowledgement order and
timeouts are tested in milliseconds: no socket, no sleep.

``FakeTransport`` behaves like a socket's transport as the protocol sees it:

* reading: the peer's bytes (``Peer.send``) are delivered with ``data_received`` only
  while the protocol has not paused reading; bytes sent meanwhile wait in ``inbox`` and
  are delivered when it resumes, exactly as a paused socket holds them in the kernel;
* writing: what the server writes stays in ``outbox`` until the peer reads it
  (``Peer.read``); crossing the high-water mark calls ``pause_writing`` and draining to
  the low-water mark calls ``resume_writing``, as asyncio's transports do.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from segmentstore_client.protocol import (
    MAX_PAYLOAD_FROM_SERVER,
    Buffer,
    Command,
    FrameDecoder,
    Hello,
    encode,
)

from segmentstore.config import ServerConfig
from segmentstore.server.connection import Connection
from segmentstore.server.context import ServerContext
from segmentstore.server.metrics import Metrics
from segmentstore.server.server import Server
from segmentstore.storage import SegmentStore, StoreConfig
from segmentstore.tables import TableStore


class Clock:
    """Time that moves only when told to."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FakeTransport(asyncio.Transport):
    def __init__(self, protocol: Connection) -> None:
        super().__init__()
        self.protocol = protocol
        self.outbox = bytearray()
        self.inbox: list[bytes] = []
        self.reading = True
        self.writing_paused = False
        self.closing = False
        self.aborted = False
        self.high = 64 * 1024
        self.low = 16 * 1024

    # --- what the protocol calls ---------------------------------------------------------

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def is_reading(self) -> bool:
        return self.reading

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True
        while self.reading and self.inbox and not self.closing:
            self.protocol.data_received(self.inbox.pop(0))

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.high = 64 * 1024 if high is None else high
        self.low = self.high // 4 if low is None else low
        self._check_high()

    def get_write_buffer_size(self) -> int:
        return len(self.outbox)

    def write(self, data: Buffer) -> None:
        if self.closing:
            return
        self.outbox += data
        self._check_high()

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)

    def abort(self) -> None:
        self.aborted = True
        self.outbox.clear()
        self.close()

    def _check_high(self) -> None:
        if not self.writing_paused and len(self.outbox) > self.high:
            self.writing_paused = True
            self.protocol.pause_writing()

    # --- what the peer does --------------------------------------------------------------

    def deliver(self, data: bytes) -> None:
        if self.closing:
            return
        if self.reading and not self.inbox:
            self.protocol.data_received(data)
        else:
            self.inbox.append(data)

    def take(self, n: int | None = None) -> bytes:
        n = len(self.outbox) if n is None else n
        data = bytes(self.outbox[:n])
        del self.outbox[:n]
        if self.writing_paused and len(self.outbox) <= self.low:
            self.writing_paused = False
            self.protocol.resume_writing()
        return data


class Peer:
    """The client end of one in-memory connection."""

    def __init__(self, conn: Connection, transport: FakeTransport) -> None:
        self.conn = conn
        self.transport = transport
        self.decoder = FrameDecoder(max_payload=MAX_PAYLOAD_FROM_SERVER)
        self.received: list[Command] = []

    def send(self, *commands: Command) -> None:
        self.transport.deliver(b"".join(encode(c) for c in commands))

    def send_raw(self, data: bytes) -> None:
        self.transport.deliver(data)

    def read(self, n: int | None = None) -> list[Command]:
        """Read (up to ``n``) bytes the server wrote; returns the commands completed."""
        got = self.decoder.feed(self.transport.take(n))
        self.received.extend(got)
        return got

    async def settle(self, turns: int = 3) -> None:
        """Let the loop run callbacks already scheduled (flushes, acks) without sleeping."""
        for _ in range(turns):
            await asyncio.sleep(0)

    async def until(
        self,
        cond: Callable[[], bool],
        what: str = "condition",
        turns: int = 20_000,
        read: bool = True,
        seconds: float = 30.0,
    ) -> None:
        """Read replies (unless ``read`` is False) and yield to the loop until ``cond()``.
        The store's commits and chunk reads run on threads, so their results come after
        some turns: the first ``turns`` yield without sleeping (millisecond tests), then
        1 ms sleeps let a slow disk's fsync finish; fail after ``seconds`` in all."""
        deadline = time.monotonic() + seconds
        turn = 0
        while True:
            if read:
                self.read()
            if cond():
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} did not happen; got {self.received[-5:]}")
            turn += 1
            await asyncio.sleep(0 if turn < turns else 0.001)

    @property
    def closed(self) -> bool:
        return self.transport.closing


@dataclasses.dataclass
class Harness:
    server: Server
    clock: Clock

    def connect(self, hello: bool = True) -> Peer:
        conn = Connection(self.server)
        transport = FakeTransport(conn)
        conn.connection_made(transport)
        peer = Peer(conn, transport)
        if hello:
            peer.send(Hello(17, 5))
        return peer


@contextlib.asynccontextmanager
async def harness(
    data_dir: Path, store: dict[str, Any] | None = None, **settings: Any
) -> AsyncIterator[Harness]:
    """A server object (no listener, no sweeper task) over a real store in ``data_dir``;
    ``settings`` override ServerConfig fields, ``store`` StoreConfig fields."""
    config = ServerConfig(data_dir=data_dir, http_port=-1, **settings).validate()
    # Small log files: the store zero-fills spare ones at open, and tests open many stores.
    options: dict[str, Any] = {"fsync": "never", "log_file_bytes": 4 << 20, **(store or {})}
    store_config = StoreConfig(data_dir=data_dir, **options)
    segments = await SegmentStore.open(store_config)
    tables = await TableStore.open(segments)
    clock = Clock()
    ctx = ServerContext(segments, tables, Metrics(), tail_read_timeout=config.tail_read_timeout_s)
    server = Server(config, ctx, clock=clock, max_connections=100)
    try:
        yield Harness(server, clock)
    finally:
        for conn in list(server.connections):
            if conn.transport is not None:
                conn.transport.close()
        await asyncio.sleep(0)
        await tables.close()
        await segments.close()
