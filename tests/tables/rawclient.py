"""A minimal raw-socket client for the table wire tests: frames in, commands out, no retries."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from segmentstore_client.protocol import (
    MAX_PAYLOAD_FROM_SERVER,
    Command,
    FrameDecoder,
    Hello,
    Reply,
    encode,
)

TIMEOUT = 20.0


class RawClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = FrameDecoder(max_payload=MAX_PAYLOAD_FROM_SERVER)
        self.pending: list[Command] = []

    @classmethod
    async def connect(cls, host: str, port: int, *, hello: bool = True) -> RawClient:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), TIMEOUT)
        client = cls(reader, writer)
        if hello:
            client.send(Hello(17, 5))
            reply = await client.next(lambda c: isinstance(c, Hello))
            assert reply == Hello(17, 5)
        return client

    def send(self, cmd: Command) -> None:
        self.writer.write(encode(cmd))

    def send_raw(self, frame: bytes) -> None:
        self.writer.write(frame)

    async def next(self, match: Any) -> Command:
        """The first received command (buffered or new) for which ``match(cmd)`` holds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TIMEOUT
        for _ in range(1_000_000):  # bounded; also by the deadline
            for i, cmd in enumerate(self.pending):
                if match(cmd):
                    del self.pending[i]
                    return cmd
            left = deadline - loop.time()
            if left <= 0:
                break
            data = await asyncio.wait_for(self.reader.read(1 << 20), left)
            if not data:
                raise ConnectionError("the server closed the connection")
            self.pending.extend(self.decoder.feed(data))
        raise TimeoutError(f"no matching reply; received {self.pending!r}")

    async def reply_to(self, request_id: int) -> Reply:
        reply = await self.next(lambda c: getattr(c, "request_id", None) == request_id)
        assert isinstance(reply, Reply)
        return reply

    async def request(self, cmd: Command) -> Reply:
        self.send(cmd)
        rid = getattr(cmd, "request_id")  # noqa: B009 (every request here has one)
        return await self.reply_to(rid)

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()
