# In-memory state of one table segment: the key index, key order, and writes in flight.
#
# Contract.
# * ``index`` maps each live key to ``(version, value)``; ``value`` is the value's bytes when
#   it is at most ``inline_limit`` long, else its length as an int (the bytes stay in the
#   segment at ``version + HEAD_SIZE + len(key)`` and are read on demand). It holds
#   *committed* state only: what every reader sees is durable.
# * ``overlay`` holds the pending state of keys touched by batches accepted by the engine
#   but not yet durable: key -> (batch seq, version), version NOT_EXISTS for a removal.
#   Conditions are checked against overlay-then-index, so pipelined batches see each other;
#   a batch's overlay entries go away when it is applied (or fails).
# * ``order`` (built on first iteration, then maintained) is every live key in ascending
#   unsigned-byte order: the iteration order of both table kinds.
# * ``length``/``p_length``: committed / accepted end of the table segment. Batches are
#   applied strictly in submission order (``inflight``), which is the engine's log order.
from __future__ import annotations

import asyncio
import bisect
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .records import HEAD_SIZE

NOT_EXISTS = -1

Entry = tuple[int, bytes | int]
"""(version, value bytes or, when not kept in memory, the value's length)."""


def record_size(key: bytes, stored: bytes | int) -> int:
    """Bytes of the update record that holds ``key`` with value ``stored`` (bytes or length)."""
    return HEAD_SIZE + len(key) + (stored if isinstance(stored, int) else len(stored))


class SortedKeys:
    """Keys in ascending byte order: a list of sorted chunks (insert/remove O(sqrt n))."""

    __slots__ = ("_len", "_lists", "_maxes")

    LOAD = 1024

    def __init__(self, keys: Iterable[bytes] = ()) -> None:
        items = sorted(keys)
        load = self.LOAD
        self._lists = [items[i : i + load] for i in range(0, len(items), load)]
        self._maxes = [lst[-1] for lst in self._lists]
        self._len = len(items)

    def __len__(self) -> int:
        return self._len

    def add(self, key: bytes) -> None:
        """Insert ``key``, which must not be present."""
        maxes = self._maxes
        if not maxes:
            self._lists.append([key])
            maxes.append(key)
            self._len = 1
            return
        i = bisect.bisect_left(maxes, key)
        if i == len(maxes):
            i -= 1
            lst = self._lists[i]
            lst.append(key)
            maxes[i] = key
        else:
            lst = self._lists[i]
            bisect.insort(lst, key)
        self._len += 1
        if len(lst) > 2 * self.LOAD:
            half = len(lst) // 2
            self._lists.insert(i + 1, lst[half:])
            del lst[half:]
            maxes.insert(i, lst[-1])

    def remove(self, key: bytes) -> bool:
        maxes = self._maxes
        i = bisect.bisect_left(maxes, key)
        if i == len(maxes):
            return False
        lst = self._lists[i]
        j = bisect.bisect_left(lst, key)
        if j == len(lst) or lst[j] != key:
            return False
        del lst[j]
        self._len -= 1
        if not lst:
            del self._lists[i]
            del maxes[i]
        elif j == len(lst):
            maxes[i] = lst[-1]
        return True

    def irange(self, after: bytes | None, low: bytes | None, high: bytes | None) -> Iterator[bytes]:
        """Keys > ``after`` and >= ``low`` and <= ``high`` (None: unbounded), ascending.

        Must be consumed without yielding to the event loop (no mutation meanwhile).
        """
        lists = self._lists
        maxes = self._maxes
        if after is not None and (low is None or after >= low):
            i = bisect.bisect_right(maxes, after)
            j = bisect.bisect_right(lists[i], after) if i < len(lists) else 0
        elif low is not None:
            i = bisect.bisect_left(maxes, low)
            j = bisect.bisect_left(lists[i], low) if i < len(lists) else 0
        else:
            i = j = 0
        while i < len(lists):
            lst = lists[i]
            for k in range(j, len(lst)):
                key = lst[k]
                if high is not None and key > high:
                    return
                yield key
            i += 1
            j = 0


@dataclass(eq=False, slots=True)
class Batch:
    """One append of records to a table segment, between acceptance and application."""

    seq: int
    changes: list[tuple[bytes, int, bytes | None]]  # (key, version, value or None = removed)
    end: int  # segment length once this batch is in
    future: asyncio.Future[Any]  # the engine's append future
    done: bool = False
    error: BaseException | None = None


@dataclass(eq=False, slots=True)
class TableState:
    name: str
    key_length: int  # 0: hash table (variable keys); K > 0: fixed-key-length table
    inline_limit: int
    length: int = 0
    p_length: int = 0
    start_offset: int = 0  # compaction point: records below it are gone
    live_bytes: int = 0  # bytes of the records that hold the live keys (compaction's gauge)
    index: dict[bytes, Entry] = field(default_factory=dict)
    order: SortedKeys | None = None
    overlay: dict[bytes, tuple[int, int]] = field(default_factory=dict)
    inflight: deque[Batch] = field(default_factory=deque)
    next_seq: int = 0
    # Set when a write failed after acceptance: later batches in flight fail too, and no
    # new write is accepted until they have all settled and ``p_length`` is resynced.
    failed: bool = False
    failures: int = 0  # batches that failed after acceptance, ever
    deleted: bool = False
    compacting: bool = False

    def pending_version(self, key: bytes) -> int:
        """Version of ``key`` once every accepted batch is durable (NOT_EXISTS if absent)."""
        o = self.overlay.get(key)
        if o is not None:
            return o[1]
        e = self.index.get(key)
        return NOT_EXISTS if e is None else e[0]

    async def wait_for_keys(self, keys: Iterable[bytes]) -> None:
        """Wait until the latest accepted write to any of ``keys`` has settled (at most one
        group commit: batches settle in order, so waiting for the newest one suffices)."""
        overlay = self.overlay
        if not overlay:
            return
        newest = max((o[0] for o in map(overlay.get, keys) if o is not None), default=-1)
        if newest < 0:
            return
        for batch in self.inflight:  # bounded by the batches in flight
            if batch.seq == newest:
                # asyncio.wait neither raises the batch's error nor cancels its future.
                await asyncio.wait([batch.future])
                return

    def has_pending_keys(self) -> bool:
        """Whether any key exists once every accepted batch is durable."""
        if any(v != NOT_EXISTS for _, v in self.overlay.values()):
            return True
        return any(key not in self.overlay for key in self.index)

    def sorted_keys(self) -> SortedKeys:
        order = self.order
        if order is None:
            order = self.order = SortedKeys(self.index)
        return order

    def put(self, key: bytes, version: int, value: bytes) -> None:
        """Committed update of ``key`` (recovery and batch application)."""
        stored: bytes | int = value if len(value) <= self.inline_limit else len(value)
        index = self.index
        old = index.get(key)
        if old is not None:
            self.live_bytes -= record_size(key, old[1])
        elif self.order is not None:
            self.order.add(key)
        index[key] = (version, stored)
        self.live_bytes += record_size(key, stored)

    def drop(self, key: bytes) -> None:
        """Committed removal of ``key``."""
        old = self.index.pop(key, None)
        if old is not None:
            self.live_bytes -= record_size(key, old[1])
            if self.order is not None:
                self.order.remove(key)

    def count_live_bytes(self) -> None:
        self.live_bytes = sum(record_size(k, e[1]) for k, e in self.index.items())

    def submit(
        self,
        changes: list[tuple[bytes, int, bytes | None]],
        end: int,
        future: asyncio.Future[Any],
    ) -> Batch:
        """Record a batch the engine has accepted; its keys become pending."""
        seq = self.next_seq
        self.next_seq = seq + 1
        batch = Batch(seq, changes, end, future)
        overlay = self.overlay
        for key, version, value in changes:
            overlay[key] = (seq, NOT_EXISTS if value is None else version)
        self.p_length = end
        self.inflight.append(batch)
        return batch

    def settle(self, batch: Batch, error: BaseException | None) -> None:
        """The engine finished ``batch``: apply every finished batch at the queue's head."""
        batch.done = True
        batch.error = error
        if error is not None:
            self.failed = True
            self.failures += 1
        inflight = self.inflight
        overlay = self.overlay
        while inflight and inflight[0].done:
            b = inflight.popleft()
            for key, version, value in b.changes:
                if b.error is None:
                    if value is None:
                        self.drop(key)
                    else:
                        self.put(key, version, value)
                o = overlay.get(key)
                if o is not None and o[0] == b.seq:
                    del overlay[key]
            if b.error is None:
                self.length = b.end
