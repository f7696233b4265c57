# Compaction of table segments (Java's scheme), in background tasks of one TableStore.
#
# Contract. A table is compacted once its segment spans at least ``min_bytes`` and less than
# half of that is live. One round takes the head of the segment (``chunk_bytes``), writes
# every live entry found there again at the tail through ``submit`` (so its version changes,
# as in Java), waits until that and every write accepted before it is durable, then
# truncates the segment at the end of the head: records below the truncation point are then
# all superseded, and the segment's start offset is the compaction point of delta reads
# (shouldClear). A round stops (the head kept) when a write failed meanwhile, the table was
# deleted or another truncation moved its start. At most one compaction runs per table
# (``TableState.compacting``); none starts once ``closed`` is set.
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from ..storage import AppendResult, SegmentNotFound, SegmentSealed, SegmentStore
from .index import TableState
from .records import MAX_RECORD_SIZE, UPDATE, parse_record
from .scans import read_exact

log = logging.getLogger("segmentstore.tables")

Submit = Callable[
    [TableState, list[tuple[bytes, bytes | None]]],
    tuple[asyncio.Future[AppendResult], list[int]],
]


class Compactor:
    def __init__(
        self,
        store: SegmentStore,
        submit: Submit,
        min_bytes: int,
        chunk_bytes: int,
        broken: Mapping[str, str],
    ) -> None:
        """``submit`` hands records to the engine at a table's accepted end (no await);
        ``broken`` names the read-only tables (never compacted)."""
        self._store = store
        self._submit = submit
        self._min = min_bytes
        self._chunk = chunk_bytes
        self._broken = broken
        self.closed = False
        self.tasks: set[asyncio.Task[None]] = set()

    def needs(self, t: TableState) -> bool:
        span = t.length - t.start_offset
        return (
            not self.closed
            and not t.deleted
            and not t.failed
            and t.name not in self._broken
            and span >= self._min
            and t.live_bytes * 2 < span
        )

    def start(self, t: TableState) -> None:
        """Compact ``t`` in a background task if it needs it and none runs yet."""
        if t.compacting or not self.needs(t):
            return
        t.compacting = True
        task = asyncio.get_running_loop().create_task(self._compact(t))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _compact(self, t: TableState) -> None:
        """Compact ``t`` until less than half of its segment is garbage."""
        try:
            for _ in range(100_000):  # bounded: each round removes a non-empty head
                if not self.needs(t) or not await self._compact_head(t):
                    return
        except asyncio.CancelledError:
            raise
        except (SegmentNotFound, SegmentSealed) as e:
            log.info("table %s: compaction stopped: %s", t.name, e)
        except Exception:
            log.exception("table %s: compaction failed", t.name)
        finally:
            t.compacting = False

    async def _compact_head(self, t: TableState) -> bool:
        name = t.name
        start = t.start_offset = self._store.info(name).start_offset
        window = min(t.length - start, max(self._chunk, MAX_RECORD_SIZE))
        data = memoryview(await read_exact(self._store, name, start, window))
        live: list[tuple[bytes, int, int, int]] = []  # key, version, value start, value length
        p = 0
        while p < self._chunk:  # each round consumes one record or stops
            rec = parse_record(data, p, start)
            if rec is None:
                break
            if rec.kind == UPDATE:
                live.append((rec.key, start + p, rec.value_start, rec.value_len))
            p = rec.end
        if p == 0 or t.start_offset != start or not self.needs(t):
            return False
        # No await from here to the append: the entries chosen are exactly those whose
        # latest (pending) record is in the head.
        failures = t.failures
        moved: list[tuple[bytes, bytes | None]] = [
            (key, bytes(data[vs : vs + vl]))
            for key, version, vs, vl in live
            if t.pending_version(key) == version
        ]
        waits: list[asyncio.Future[Any]] = [b.future for b in t.inflight]
        if moved:
            fut, _ = self._submit(t, moved)
            waits.append(fut)
        if waits:
            await asyncio.wait(waits)
        if t.failures != failures or t.deleted or t.start_offset != start:
            return False  # a write failed: the head may still hold the only copy of a key
        await self._store.truncate(name, start + p)
        t.start_offset = start + p
        log.debug(
            "table %s: compacted [%d, %d), moved %d entries", name, start, start + p, len(moved)
        )
        return True
