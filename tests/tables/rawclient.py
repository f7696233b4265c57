"""The table wire tests' client: the one raw wire client of the tests
(``tests/server/wire.py``), with the two habits these tests rely on: ``next`` consumes
the frame it returns, and replies are typed ``Reply``."""

from __future__ import annotations

from collections.abc import Callable

from segmentstore_client.protocol import Command, Reply
from server.wire import WireClient

TIMEOUT = 20.0


class RawClient(WireClient):
    async def next(self, match: Callable[[Command], bool]) -> Command:
        """The first received command (buffered or new) matching ``match``; consumed."""
        cmd = await self.wait_for(match, TIMEOUT)
        self.received.remove(cmd)
        return cmd

    async def reply_to(self, request_id: int, timeout: float = TIMEOUT) -> Reply:
        reply = await super().reply_to(request_id, timeout)
        assert isinstance(reply, Reply)
        return reply

    async def request(self, cmd: Command, timeout: float = TIMEOUT) -> Reply:
        reply = await super().request(cmd, timeout)
        assert isinstance(reply, Reply)
        return reply
