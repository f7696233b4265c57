# Writing a group commit's acks and tail-read replies one event-loop turn sooner.
#
# Contract. A connection queues replies and writes them with a ``call_soon`` flush, so
# everything one turn produces goes out in one ``writelines``. A group commit completes its
# futures in turn k; their callbacks (``Appends._drain`` making the DataAppended acks, the
# woken tail reads making their replies) run in turn k + 1 and queue output; the
# connections' own flushes would run in turn k + 2, after the loop has polled and handled
# whatever else arrived (on a busy server, many connections' worth of Python). ``committed``
# (called once per group commit, after the futures were completed) schedules ``flush_all``
# behind those callbacks, in turn k + 1: it writes every connection's queued output and
# cancels the connection's own flush. Still one write per connection per turn; nothing is
# written earlier than the callbacks that made it.
from __future__ import annotations

import asyncio
from typing import Protocol


class Flushable(Protocol):
    def flush_now(self) -> None: ...


class EarlyFlush:
    """Connections with output queued this turn, flushed together after a group commit."""

    __slots__ = ("_loop", "_queued", "_scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queued: set[Flushable] = set()
        self._scheduled = False

    def add(self, conn: Flushable) -> None:
        self._queued.add(conn)

    def discard(self, conn: Flushable) -> None:
        self._queued.discard(conn)

    def committed(self, records: int = 0, fsync_seconds: float = 0.0) -> None:
        """A group commit completed its futures: flush behind their callbacks."""
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self.flush_all)

    def flush_all(self) -> None:
        self._scheduled = False
        queued, self._queued = self._queued, set()
        for conn in queued:
            conn.flush_now()
