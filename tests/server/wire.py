"""The raw-protocol asyncio client of the tests (server, tables, adversarial).

It speaks frames, nothing more: connect, send commands (or raw bytes), wait for replies by
request id, and keep every frame the server sent, in arrival order, so that tests can look
at DataAppended acknowledgements, error replies and the connection closing. No retries and
no reconnection logic: what the server does is exactly what the test sees.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Self, TypeVar

from segmentstore_client.protocol import (
    MAX_PAYLOAD_FROM_SERVER,
    NULL_ATTRIBUTE_VALUE,
    AppendSetup,
    Command,
    CreateSegment,
    DataAppended,
    EventParser,
    FrameDecoder,
    GetStreamSegmentInfo,
    Hello,
    KeepAlive,
    ReadSegment,
    SegmentCreated,
    SegmentRead,
    SetupAppend,
    StreamSegmentInfo,
    encode,
)

DEFAULT_TIMEOUT = 10.0
R = TypeVar("R", bound=Command)

# Request ids unique within a test process: every helper below draws from here.
_ids = itertools.count(1_000)


def next_id() -> int:
    return next(_ids)


def request_id_of(cmd: Command) -> int | None:
    rid = getattr(cmd, "request_id", None)
    return rid if isinstance(rid, int) else None


class ConnectionClosed(Exception):
    """The server closed the connection while we were waiting for something."""


class WireClient:
    """One TCP connection to the server, with every received frame recorded."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = FrameDecoder(max_payload=MAX_PAYLOAD_FROM_SERVER)
        self.received: list[Command] = []
        self.closed = asyncio.get_running_loop().create_future()  # result: reason
        self._changed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task = asyncio.get_running_loop().create_task(self._read_loop())

    @classmethod
    async def connect(
        cls, host: str, port: int, *, hello: bool = True, timeout: float = DEFAULT_TIMEOUT
    ) -> Self:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, limit=32 * 1024 * 1024), timeout
        )
        client = cls(reader, writer)
        if hello:
            client.send(Hello(17, 5))
            reply = await client.wait_for(lambda c: isinstance(c, Hello), timeout)
            assert reply == Hello(17, 5), reply
        return client

    # --- plumbing -------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        reason = "eof"
        try:
            while True:
                data = await self.reader.read(1 << 20)
                if not data:
                    break
                cmds = self.decoder.feed(data)
                if cmds:
                    self.received.extend(cmds)
                    self._notify()
        except (ConnectionError, OSError) as e:
            reason = f"error: {e!r}"
        except Exception as e:  # a decoding error: the server sent a bad frame
            reason = f"bad frame from server: {e!r}"
        finally:
            if not self.closed.done():
                self.closed.set_result(reason)
            self._notify()

    def _notify(self) -> None:
        fut, self._changed = self._changed, asyncio.get_running_loop().create_future()
        if not fut.done():
            fut.set_result(None)

    @property
    def is_closed(self) -> bool:
        return self.closed.done()

    def send(self, *cmds: Command) -> None:
        self.writer.write(b"".join(encode(c) for c in cmds))

    def send_raw(self, data: bytes) -> None:
        self.writer.write(data)

    async def drain(self) -> None:
        await self.writer.drain()

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.writer.wait_closed(), 5)
        self._task.cancel()
        with contextlib.suppress(BaseException):
            await self._task

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- waiting --------------------------------------------------------------------------

    def by_id(self, request_id: int) -> list[Command]:
        """Every received frame (not DataAppended) carrying ``request_id``."""
        return [
            c
            for c in self.received
            if not isinstance(c, DataAppended) and request_id_of(c) == request_id
        ]

    def find(self, pred: Callable[[Command], bool]) -> Command | None:
        for c in self.received:
            if pred(c):
                return c
        return None

    async def wait_for(
        self, pred: Callable[[Command], bool], timeout: float = DEFAULT_TIMEOUT
    ) -> Command:
        """The first received frame matching ``pred`` (already received or yet to come)."""
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            for c in self.received[seen:]:
                if pred(c):
                    return c
            seen = len(self.received)
            if self.is_closed:
                raise ConnectionClosed(f"closed ({self.closed.result()}) while waiting")
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no matching frame within {timeout}s; got {self.received[-5:]}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._changed), left)

    async def wait_until(self, cond: Callable[[], bool], timeout: float = DEFAULT_TIMEOUT) -> None:
        """Wait until ``cond()`` holds, re-checked whenever a frame arrives."""
        deadline = time.monotonic() + timeout
        while not cond():
            if self.is_closed:
                raise ConnectionClosed(f"closed ({self.closed.result()}) while waiting")
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"condition not met within {timeout}s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._changed), left)

    async def wait_closed(self, timeout: float = DEFAULT_TIMEOUT) -> str:
        return await asyncio.wait_for(asyncio.shield(self.closed), timeout)

    async def reply_to(self, request_id: int, timeout: float = DEFAULT_TIMEOUT) -> Command:
        return await self.wait_for(
            lambda c: not isinstance(c, DataAppended) and request_id_of(c) == request_id, timeout
        )

    async def request(self, cmd: Command, timeout: float = DEFAULT_TIMEOUT) -> Command:
        """Send a request and return the (first) frame carrying its request id."""
        rid = request_id_of(cmd)
        assert rid is not None, cmd
        self.send(cmd)
        return await self.reply_to(rid, timeout)

    async def expect(self, cmd: Command, kind: type[R], timeout: float = DEFAULT_TIMEOUT) -> R:
        reply = await self.request(cmd, timeout)
        assert isinstance(reply, kind), f"{cmd!r} -> {reply!r}, wanted {kind.__name__}"
        return reply

    # --- views ----------------------------------------------------------------------------

    def acks(self, writer_id: uuid.UUID | None = None) -> list[DataAppended]:
        return [
            c
            for c in self.received
            if isinstance(c, DataAppended) and (writer_id is None or c.writer_id == writer_id)
        ]

    def last_acked(self, writer_id: uuid.UUID) -> int:
        acks = self.acks(writer_id)
        return acks[-1].event_number if acks else NULL_ATTRIBUTE_VALUE

    async def wait_acked(
        self, writer_id: uuid.UUID, event_number: int, timeout: float = DEFAULT_TIMEOUT
    ) -> DataAppended:
        ack = await self.wait_for(
            lambda c: (
                isinstance(c, DataAppended)
                and c.writer_id == writer_id
                and c.event_number >= event_number
            ),
            timeout,
        )
        assert isinstance(ack, DataAppended)
        return ack

    def of_type(self, kind: type[R]) -> list[R]:
        return [c for c in self.received if isinstance(c, kind)]

    # --- common request shapes --------------------------------------------------------------

    async def create_segment(self, name: str, **kw: Any) -> None:
        await self.expect(CreateSegment(next_id(), name, **kw), SegmentCreated)

    async def info(self, name: str) -> StreamSegmentInfo:
        return await self.expect(GetStreamSegmentInfo(next_id(), name, ""), StreamSegmentInfo)

    async def setup_append(self, writer_id: uuid.UUID, segment: str) -> int:
        reply = await self.expect(SetupAppend(next_id(), writer_id, segment, ""), AppendSetup)
        assert reply.writer_id == writer_id and reply.segment == segment
        return reply.last_event_number

    async def read(
        self, segment: str, offset: int, length: int = 1 << 20, timeout: float = DEFAULT_TIMEOUT
    ) -> Command:
        return await self.request(ReadSegment(segment, offset, length, "", next_id()), timeout)

    async def read_all(self, segment: str, start: int | None = None) -> bytes:
        """Every byte of the segment from ``start`` (default: its start offset) to its end."""
        info = await self.info(segment)
        offset = info.start_offset if start is None else start
        parts: list[bytes] = []
        for _ in range(100_000):
            if offset >= info.write_offset:
                break
            reply = await self.read(segment, offset, 2 << 20)
            assert isinstance(reply, SegmentRead), reply
            assert reply.offset == offset
            assert len(reply.data) > 0, reply
            parts.append(bytes(reply.data))
            offset += len(reply.data)
        assert offset == info.write_offset
        return b"".join(parts)

    async def keepalive(self) -> None:
        before = len(self.of_type(KeepAlive))
        self.send(KeepAlive())
        await self.wait_until(lambda: len(self.of_type(KeepAlive)) > before)


def parse_events(data: bytes) -> list[bytes]:
    """Split segment bytes into event payloads; the whole buffer must be whole records."""
    parser = EventParser()
    events = [payload for _, payload in parser.feed(data)]
    assert parser.pending == 0, f"{parser.pending} bytes of an incomplete record at the end"
    return events


def event_payload(writer: int, number: int, size: int) -> bytes:
    """A self-describing event: 'w<writer>:<number>:' padded with a fill byte to ``size``."""
    head = f"w{writer}:{number}:".encode()
    fill = bytes([65 + (writer + number) % 26])
    return head + fill * max(0, size - len(head))


def decode_payload(payload: bytes) -> tuple[int, int]:
    writer, number, _ = payload.split(b":", 2)
    return int(writer[1:]), int(number)


def check_per_writer_order(
    events: Sequence[bytes], expected: dict[int, Iterable[int]], exact: bool = True
) -> None:
    """Each writer's events appear exactly once, in increasing order, and are intact."""
    seen: dict[int, list[int]] = {}
    for payload in events:
        w, n = decode_payload(payload)
        size = len(payload)
        assert payload == event_payload(w, n, size), f"event w{w}:{n} corrupted"
        seen.setdefault(w, []).append(n)
    for w, numbers in expected.items():
        got = seen.get(w, [])
        want = list(numbers)
        if exact:
            assert got == want, f"writer {w}: got {got[:10]}... ({len(got)}), want {len(want)}"
        else:
            assert got == sorted(set(got)), f"writer {w}: duplicates or disorder"
            assert set(want) <= set(got), f"writer {w}: missing {sorted(set(want) - set(got))[:10]}"


def unique(prefix: str = "t") -> str:
    """A fresh segment name in Pravega's form."""
    return f"{prefix}{uuid.uuid4().hex[:8]}/st/0.#epoch.0"


__all__ = [
    "DEFAULT_TIMEOUT",
    "ConnectionClosed",
    "WireClient",
    "check_per_writer_order",
    "decode_payload",
    "event_payload",
    "next_id",
    "parse_events",
    "request_id_of",
    "unique",
]
