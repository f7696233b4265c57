"""Store-wide byte budgets shared by every connection (Pravega's ConnectionTracker idea).

A :class:`Budget` counts bytes that connections hold: buffered input of partial frames,
queued output, appends not yet durable. Each connection charges what it holds and gives it
back when the bytes leave; the budget itself never refuses a charge (the bytes already
exist), it only says whether it is over its limit. A connection that finds it over stops
taking more (pauses its socket or its dispatch) and registers a wake-up callback; the
callbacks run (on the next loop turn) once the total is back at or under the limit.

``fair_share`` is what one of ``n`` connections may hold before it must wait even while
the budget has room, so that a few connections cannot take all of it.
"""

from __future__ import annotations

from collections.abc import Callable


class Budget:
    __slots__ = ("_schedule", "_waiting", "floor", "limit", "name", "peak", "used")

    def __init__(
        self,
        name: str,
        limit: int,
        schedule: Callable[[Callable[[], None]], object],
        floor: int = 64 * 1024,
    ) -> None:
        self.name = name
        self.limit = limit
        self.floor = floor  # the least any connection may hold, however many there are
        self.used = 0
        self.peak = 0
        self._schedule = schedule
        self._waiting: dict[object, Callable[[], None]] = {}

    @property
    def over(self) -> bool:
        return self.used > self.limit

    def charge(self, delta: int) -> None:
        """Add ``delta`` bytes (negative: give back); wake the waiters once under the limit."""
        self.used += delta
        if self.used > self.peak:
            self.peak = self.used
        if delta < 0 and self._waiting and self.used <= self.limit:
            waiting, self._waiting = self._waiting, {}
            for wake in waiting.values():
                self._schedule(wake)

    def wait(self, key: object, wake: Callable[[], None]) -> None:
        """Call ``wake`` once the budget is under its limit (at most once per ``key``)."""
        if self.used <= self.limit:
            self._schedule(wake)
        else:
            self._waiting[key] = wake

    def forget(self, key: object) -> None:
        self._waiting.pop(key, None)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def fair_share(self, holders: int) -> int:
        return max(self.floor, self.limit // max(1, holders))
