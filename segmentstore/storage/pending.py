# The store-wide bound on bytes accepted but not yet durable.
#
# Contract. One ``PendingBytes`` is shared by every container of a store (and so by every
# connection, table and caller above it). An append or merge takes its payload's bytes with
# ``try_take`` when it is accepted, before it is ordered; the container gives them back with
# ``release`` when its record is durable (or its batch failed). ``try_take`` refuses when
# the total would pass ``limit`` (a single payload larger than the limit is still taken when
# nothing else is pending, so it can never be refused forever): the caller fails that append
# with the retriable ``StoreOverloaded``. Callers that would rather wait than be refused
# ``await wait_for_room()`` before appending. Event-loop only; no locks.
from __future__ import annotations

import asyncio


class PendingBytes:
    __slots__ = ("_waiters", "limit", "used")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._waiters: list[asyncio.Future[None]] = []

    def try_take(self, n: int) -> bool:
        used = self.used
        if used + n > self.limit and used > 0:
            return False
        self.used = used + n
        return True

    def release(self, n: int) -> None:
        self.used -= n
        if self._waiters and self.used < self.limit:
            waiters, self._waiters = self._waiters, []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    async def wait_for_room(self) -> None:
        """Return once the pending bytes are below the limit."""
        while self.used >= self.limit:
            fut = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            await fut
