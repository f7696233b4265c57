# Writing a group commit's acks and tail-read replies one event-loop turn sooner, acks first.
#
# Contract. A connection queues replies and writes them with a ``call_soon`` flush, so
# everything one turn produces goes out in one ``writelines``. A group commit completes its
# futures in turn k; their callbacks (``Appends._drain`` making the DataAppended acks) run in
# turn k + 1 and queue output; the connections' own flushes would run in turn k + 2, after
# the loop has polled and handled whatever else arrived (on a busy server, many
# connections' worth of Python). ``committed`` (called once per group commit, after the
# futures were completed) schedules ``flush_all`` behind those callbacks, in turn k + 1: it
# writes every connection's queued output, in the order it was queued, and cancels the
# connection's own flush. Nothing is written earlier than the callbacks that made it.
# Tail reads (issue 19): the commit wakes the reads parked on the segments it changed
# after its futures (``woken``, which schedules ``flush_all`` when ``committed`` has not);
# ``flush_all`` answers them after the acks were written, then writes those replies at
# once: a writer's ack does not wait for the replies its event woke, nor a reply for the
# next turn. At most two writes per connection per ``flush_all`` (its acks, its replies).
from __future__ import annotations

import asyncio
from typing import Protocol


class Flushable(Protocol):
    def flush_now(self) -> None: ...


class Answerable(Protocol):
    def answer(self) -> None: ...


class EarlyFlush:
    """Connections with output queued this turn, flushed together after a group commit,
    and the tail reads it woke, answered behind them."""

    __slots__ = ("_loop", "_queued", "_scheduled", "_woken")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        # A dict as an ordered set: connections are flushed in the order they queued.
        self._queued: dict[Flushable, None] = {}
        self._woken: list[Answerable] = []
        self._scheduled = False

    def add(self, conn: Flushable) -> None:
        self._queued[conn] = None

    def discard(self, conn: Flushable) -> None:
        self._queued.pop(conn, None)

    def committed(self, records: int = 0, fsync_seconds: float = 0.0) -> None:
        """A group commit completed its futures: flush behind their callbacks."""
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self.flush_all)

    def woken(self, read: Answerable) -> None:
        """A parked tail read was woken (after its commit's futures): answer it in
        ``flush_all``, behind the acks."""
        self._woken.append(read)
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self.flush_all)

    def flush_all(self) -> None:
        self._scheduled = False
        self._flush_queued()
        if self._woken:
            woken, self._woken = self._woken, []
            for read in woken:
                read.answer()
            self._flush_queued()

    def _flush_queued(self) -> None:
        queued, self._queued = self._queued, {}
        for conn in queued:
            conn.flush_now()
