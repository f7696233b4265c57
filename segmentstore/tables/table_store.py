# TableStore: versioned key-value tables (Pravega table segments) on the storage engine.
#
# Contract.
# * A table is a segment of type SEGMENT_TYPE_TABLE (variable-length keys) or
#   SEGMENT_TYPE_FIXED_KEY_TABLE (keys of exactly K bytes, K kept in core attribute 12,
#   ATTRIBUTE_ID_LENGTH, as Java does). Its bytes are a log of records (records.py); a key's
#   version is the segment offset of its latest update record, so versions only grow, also
#   across restarts.
# * A write (update or removal batch) is checked and handed to the engine with
#   ``expected_offset`` in one synchronous step, so conditions and the append are atomic
#   (all-or-nothing: one append carries the whole batch) without a lock, and batches to one
#   table pipeline into the engine's group commit. Conditions see every accepted batch
#   (index.py ``overlay``); readers see only durable state. A caller gets its reply only
#   after its batch is applied to the index, so a later read sees it.
# * ``open`` rebuilds every table's index by scanning its segment once (no checkpoint of our
#   own: the scan is a few seconds for 1,000,000 keys, see scripts/bench_tables.py).
# * Iteration order for both kinds is ascending unsigned key bytes; a continuation token is
#   ``0x01 | last returned key``, so it survives updates and restarts and a key that exists
#   throughout an iteration is returned exactly once.
# * Compaction (Java's scheme): once less than half of a table segment is live, live entries
#   at its head are written again at the tail (new versions) and the head is truncated; the
#   segment's start offset is the compaction point of delta reads (shouldClear).
# * Everything runs on the event loop that opened the SegmentStore.
# Pages of keys/entries are paging.py's job, scans of the segment (index rebuild, delta
# reads) scans.py's, compaction compaction.py's; this module holds the tables, the writes
# and the lookups.
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

from ..storage import (
    CREATION_TIME,
    ROLLOVER_SIZE,
    SEGMENT_TYPE_FIXED_KEY_TABLE,
    SEGMENT_TYPE_TABLE,
    AppendResult,
    BadOffset,
    SegmentDamaged,
    SegmentInfo,
    SegmentNotFound,
    SegmentStore,
    SegmentTruncated,
    StorageUnavailable,
)
from . import paging
from .compaction import Compactor
from .errors import (
    IllegalTableArgument,
    NotATableSegment,
    TableError,
    TableKeyNotFound,
    TableKeyVersionMismatch,
    TableNotEmpty,
    TableOffsetMismatch,
    TableOperationUnsupported,
)
from .index import NOT_EXISTS, Batch, Entry, TableState
from .records import (
    HEAD_SIZE,
    MAX_KEY_LENGTH,
    MAX_VALUE_LENGTH,
    encode_batch,
)
from .scans import (
    KEY_LENGTH_ATTRIBUTE,
    MAX_FIXED_KEY_LENGTH,
    DeltaRead,
    load_table,
    read_delta,
    read_exact,
)

log = logging.getLogger("segmentstore.tables")

Buffer = bytes | bytearray | memoryview

NO_VERSION: Final = -(2**63)
"""Key condition "unconditional" (Long.MIN_VALUE)."""
NO_OFFSET: Final = -1
"""tableSegmentOffset meaning "no condition on the table segment's length"."""
DEFAULT_INLINE_VALUE_BYTES: Final = 1024
DEFAULT_COMPACTION_MIN_BYTES: Final = 1024 * 1024
DEFAULT_COMPACTION_CHUNK_BYTES: Final = 4 * 1024 * 1024
CLOSE_WAIT_SECONDS: Final = 10.0


class TableCorrupted(TableError):
    """The table segment holds bytes that are not table records; the table is read-only."""


@dataclass(frozen=True, slots=True)
class TableInfo:
    start_offset: int
    length: int
    entry_count: int
    key_length: int


class TableStore:
    """Every table segment of one SegmentStore. Build with ``await TableStore.open(store)``."""

    def __init__(
        self,
        store: SegmentStore,
        *,
        inline_value_bytes: int = DEFAULT_INLINE_VALUE_BYTES,
        compaction_min_bytes: int = DEFAULT_COMPACTION_MIN_BYTES,
        compaction_chunk_bytes: int = DEFAULT_COMPACTION_CHUNK_BYTES,
    ) -> None:
        """Prefer ``open``. Values up to ``inline_value_bytes`` are kept in memory (larger
        ones are read from the segment on demand). A table is compacted once its segment
        spans at least ``compaction_min_bytes`` and less than half of that is live data,
        ``compaction_chunk_bytes`` of its head at a time."""
        self._store = store
        self._inline = inline_value_bytes
        self._tables: dict[str, TableState] = {}
        self._loading: dict[str, asyncio.Future[TableState]] = {}
        self._broken: dict[str, str] = {}
        self._compactor = Compactor(
            store, self._submit, compaction_min_bytes, compaction_chunk_bytes, self._broken
        )
        self._closed = False
        self.recovery_seconds = 0.0

    @classmethod
    async def open(cls, store: SegmentStore, **options: int) -> TableStore:
        """Index every table segment of ``store`` (which must be open); ``options`` are the
        constructor's keyword arguments."""
        tables = cls(store, **options)
        t0 = time.perf_counter()
        keys = 0
        for name in store.segment_names():
            try:
                info = store.info(name)
            except SegmentNotFound:
                continue
            if info.segment_type & SEGMENT_TYPE_TABLE:
                try:
                    t = await tables._load(info)
                except SegmentDamaged as e:
                    # Its data at rest is damaged: requests for it fail (each one tries to
                    # load it again), every other table is served.
                    log.error("table %s not indexed: %s", name, e)
                    continue
                tables._tables[name] = t
                keys += len(t.index)
        tables.recovery_seconds = time.perf_counter() - t0
        log.info(
            "tables open: %d table(s), %d key(s), indexed in %.3f s",
            len(tables._tables),
            keys,
            tables.recovery_seconds,
        )
        return tables

    async def close(self) -> None:
        """Refuse new requests, wait (bounded) for writes in flight and compactions; the
        SegmentStore stays open (close it afterwards)."""
        self._closed = self._compactor.closed = True
        await self.wait_idle()
        background = list(self._compactor.tasks)
        for task in background:
            task.cancel()
        if background:
            await asyncio.wait(background, timeout=CLOSE_WAIT_SECONDS)
        self._tables.clear()

    async def wait_idle(self, timeout: float = CLOSE_WAIT_SECONDS) -> None:
        """Wait (at most ``timeout``) until no write is in flight and no compaction runs."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:  # bounded by the deadline
            waits: list[asyncio.Future[Any]] = [
                b.future for t in self._tables.values() for b in t.inflight
            ]
            waits.extend(self._compactor.tasks)
            if not waits:
                return
            await asyncio.wait(waits, timeout=deadline - loop.time())

    def forget(self, name: str) -> None:
        """Drop what is cached about ``name`` (call after deleting it other than via ``delete``)."""
        self._tables.pop(name, None)
        self._broken.pop(name, None)

    def stats(self) -> dict[str, float]:
        return {
            "tables": float(len(self._tables)),
            "table_keys": float(sum(len(t.index) for t in self._tables.values())),
        }

    # ------------------------------------------------------------------ table lifecycle

    async def create(self, name: str, key_length: int = 0, rollover_size: int = 0) -> None:
        """Create an empty table; ``key_length`` 0 = variable keys, K = fixed K-byte keys."""
        self._check_open(name)
        if not 0 <= key_length <= MAX_FIXED_KEY_LENGTH:
            raise IllegalTableArgument(
                name, f"key length {key_length} outside 0..{MAX_FIXED_KEY_LENGTH}"
            )
        attributes = {CREATION_TIME: int(time.time() * 1000), ROLLOVER_SIZE: max(0, rollover_size)}
        segment_type = SEGMENT_TYPE_TABLE
        if key_length:
            attributes[KEY_LENGTH_ATTRIBUTE] = key_length
            segment_type = SEGMENT_TYPE_FIXED_KEY_TABLE
        await self._store.create_segment(name, segment_type=segment_type, attributes=attributes)
        self._broken.pop(name, None)
        self._tables[name] = TableState(name, key_length, self._inline)

    async def delete(self, name: str, must_be_empty: bool = False) -> None:
        t = await self._table(name)
        if must_be_empty:
            if t.key_length:
                raise TableOperationUnsupported(name, "deleteTableSegment")
            if t.has_pending_keys():
                raise TableNotEmpty(name, "the table has keys")
        t.deleted = True
        try:
            await self._store.delete(name)
        except SegmentNotFound:
            self.forget(name)
            raise
        except BaseException:
            t.deleted = False
            raise
        if self._tables.get(name) is t:
            self.forget(name)

    async def info(self, name: str) -> TableInfo:
        t = await self._table(name)
        seg = self._store.info(name)
        return TableInfo(seg.start_offset, seg.length, len(t.index), t.key_length)

    # ------------------------------------------------------------------ writes

    async def update(
        self,
        name: str,
        entries: Sequence[tuple[Buffer, Buffer, int]],
        table_offset: int = NO_OFFSET,
    ) -> list[int]:
        """Write ``(key, value, condition)`` entries atomically; returns each new version.

        condition: NO_VERSION (unconditional), NOT_EXISTS (-1, insert only) or the key's
        current version. Raises TableKeyNotFound / TableKeyVersionMismatch (nothing
        written), TableOffsetMismatch when ``table_offset`` is not -1 and differs from the
        table segment's length, IllegalTableArgument for bad sizes or conditions.
        """
        t = await self._table(name)
        changes: list[tuple[bytes, bytes | None, int]] = []
        for key, value, condition in entries:
            k = self._checked_key(t, key)
            if len(value) > MAX_VALUE_LENGTH:
                raise IllegalTableArgument(
                    name, f"value of {len(value)} bytes exceeds {MAX_VALUE_LENGTH}"
                )
            _check_condition(name, condition)
            changes.append((k, bytes(value), condition))
        return await self._write(t, changes, table_offset)

    async def remove(
        self,
        name: str,
        keys: Sequence[tuple[Buffer, int]],
        table_offset: int = NO_OFFSET,
    ) -> None:
        """Remove ``(key, condition)`` keys atomically; removing an absent key is a no-op."""
        t = await self._table(name)
        changes: list[tuple[bytes, bytes | None, int]] = []
        for key, condition in keys:
            k = self._checked_key(t, key)
            _check_condition(name, condition)
            changes.append((k, None, condition))
        await self._write(t, changes, table_offset)

    async def _write(
        self, t: TableState, changes: list[tuple[bytes, bytes | None, int]], table_offset: int
    ) -> list[int]:
        # From here to the engine's append there is no await: check + accept are atomic.
        name = t.name
        self._check_writable(t)
        missing = bad = False
        for key, _, condition in changes:
            if condition == NO_VERSION:
                continue
            current = t.pending_version(key)
            if condition == NOT_EXISTS:
                bad |= current != NOT_EXISTS
            elif current == NOT_EXISTS:
                missing = True
            else:
                bad |= current != condition
        if missing:
            raise TableKeyNotFound(name, "a conditional key does not exist")
        if bad:
            raise TableKeyVersionMismatch(name, "a conditional key has another version")
        base = t.p_length
        if table_offset != NO_OFFSET and table_offset != base:
            raise TableOffsetMismatch(name, table_offset, base)
        records = [
            (key, value)
            for key, value, _ in changes
            if value is not None or t.pending_version(key) != NOT_EXISTS
        ]
        if not records:
            return []
        fut, offsets = self._submit(t, records)
        # shield: a cancelled caller must not cancel the engine's future; the batch is
        # applied by ``_written`` either way.
        await asyncio.shield(fut)
        return offsets

    def _submit(
        self, t: TableState, records: list[tuple[bytes, bytes | None]]
    ) -> tuple[asyncio.Future[AppendResult], list[int]]:
        """Hand ``records`` to the engine at the table's accepted end (no await inside)."""
        base = t.p_length
        payload, offsets = encode_batch(records, base)
        fut = self._store.append(t.name, payload, expected_offset=base, event_count=0)
        if fut.done() and not fut.cancelled():
            exc = fut.exception()
            if isinstance(exc, BadOffset):
                # The engine's end of the segment is not ours: something other than this
                # layer appended to the table segment.
                self._mark_broken(t, f"append refused: {exc}")
                raise TableCorrupted(t.name, f"table segment modified underneath: {exc}") from exc
            if exc is not None:
                raise exc
        batch = t.submit(
            [(key, off, value) for (key, value), off in zip(records, offsets, strict=True)],
            base + len(payload),
            fut,
        )
        fut.add_done_callback(partial(self._written, t, batch))
        return fut, offsets

    def _written(self, t: TableState, batch: Batch, fut: asyncio.Future[AppendResult]) -> None:
        error = asyncio.CancelledError() if fut.cancelled() else fut.exception()
        t.settle(batch, error)
        if error is not None:
            log.error(
                "table %s: write of %d record(s) failed: %s", t.name, len(batch.changes), error
            )
        if t.failed and not t.inflight:
            # Every batch accepted after the failed one has failed too (the engine fails
            # everything queued behind a failed log write): start again from committed state.
            t.failed = False
            t.overlay.clear()
            t.p_length = t.length
            try:
                engine_length = self._store.info(t.name).length
            except SegmentNotFound:
                return
            if engine_length != t.length:
                self._mark_broken(t, f"segment length {engine_length}, table end {t.length}")
        elif error is None:
            self._compactor.start(t)

    # ------------------------------------------------------------------ reads

    async def get(self, name: str, keys: Sequence[Buffer]) -> list[tuple[int, bytes] | None]:
        """Current ``(version, value)`` of each key, None where absent.

        A key with a write in flight is read once that write has settled, so a read that
        follows a failed condition sees the state the condition was checked against (a
        client that refetches and retries cannot spin on a stale version).
        """
        t = await self._table(name)
        checked = [self._checked_key(t, key) for key in keys]
        await t.wait_for_keys(checked)
        index = t.index
        found = [(key, index.get(key)) for key in checked]  # one consistent snapshot
        return [None if e is None else await self._resolve(t, key, e) for key, e in found]

    async def read_keys(
        self,
        name: str,
        limit: int,
        token: Buffer = b"",
        from_key: Buffer = b"",
        to_key: Buffer = b"",
    ) -> tuple[list[tuple[bytes, int]], bytes]:
        """One page of ``(key, version)`` and the token for the next (empty page = end)."""
        t = await self._table(name)
        page, next_token = paging.page(t, limit, token, from_key, to_key, False)
        return [(key, entry[0]) for key, entry in page], next_token

    async def read_entries(
        self,
        name: str,
        limit: int,
        token: Buffer = b"",
        from_key: Buffer = b"",
        to_key: Buffer = b"",
    ) -> tuple[list[tuple[bytes, bytes, int]], bytes]:
        """One page of ``(key, value, version)`` and the token for the next (empty = end)."""
        t = await self._table(name)
        page, next_token = paging.page(t, limit, token, from_key, to_key, True)
        out: list[tuple[bytes, bytes, int]] = []
        for key, entry in page:
            resolved = await self._resolve(t, key, entry)
            if resolved is not None:
                out.append((key, resolved[1], resolved[0]))
        return out, next_token

    async def read_delta(self, name: str, from_position: int, limit: int) -> DeltaRead:
        """Changes recorded at or after ``from_position``, newest update per key (10.4).

        A removal drops the key from this reply's result (Java's behaviour; removals are
        not reported). Nothing consumed gives ``([], False, True, 0)``.
        """
        t = await self._table(name)
        if t.key_length:
            raise TableOperationUnsupported(name, "readTableEntriesDelta")
        for _ in range(3):  # a compaction may truncate the segment under the scan: restart
            try:
                return await read_delta(self._store, name, from_position, limit)
            except SegmentTruncated:
                continue
        return await read_delta(self._store, name, from_position, limit)

    # ------------------------------------------------------------------ internals

    def _check_open(self, name: str) -> None:
        if self._closed:
            raise StorageUnavailable(name, "the table store is closed")

    def _check_writable(self, t: TableState) -> None:
        if t.deleted:
            raise SegmentNotFound(t.name)
        reason = self._broken.get(t.name)
        if reason is not None:
            raise TableCorrupted(t.name, f"table is read-only: {reason}")
        if t.failed:
            raise StorageUnavailable(t.name, "an earlier write to this table failed; retry")

    def _mark_broken(self, t: TableState, reason: str) -> None:
        log.error("table %s is read-only from now on: %s", t.name, reason)
        self._broken[t.name] = reason

    def _checked_key(self, t: TableState, key: Buffer) -> bytes:
        n = len(key)
        if t.key_length:
            if n != t.key_length:
                raise IllegalTableArgument(
                    t.name, f"key of {n} bytes, the table's keys have {t.key_length}"
                )
        elif not 1 <= n <= MAX_KEY_LENGTH:
            raise IllegalTableArgument(t.name, f"key of {n} bytes outside 1..{MAX_KEY_LENGTH}")
        return key if type(key) is bytes else bytes(key)

    async def _table(self, name: str) -> TableState:
        self._check_open(name)
        t = self._tables.get(name)
        store = self._store
        if t is not None:
            if t.deleted:
                raise SegmentNotFound(name)
            if store.exists(name):
                return t
            self.forget(name)  # deleted by a plain DeleteSegment
            raise SegmentNotFound(name)
        if not store.exists(name):
            raise SegmentNotFound(name)
        info = store.info(name)
        if not info.segment_type & SEGMENT_TYPE_TABLE:
            raise NotATableSegment(name, "not a table segment")
        loading = self._loading.get(name)
        if loading is not None:
            return await asyncio.shield(loading)
        fut: asyncio.Future[TableState] = asyncio.get_running_loop().create_future()
        self._loading[name] = fut
        try:
            t = await self._load(info)
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()  # retrieved: nobody else may be waiting
            raise
        finally:
            del self._loading[name]
        self._tables[name] = t
        fut.set_result(t)
        return t

    async def _load(self, info: SegmentInfo) -> TableState:
        t, broken = await load_table(self._store, info, self._inline)
        if broken is not None:
            self._broken[info.name] = broken
        return t

    async def _resolve(self, t: TableState, key: bytes, entry: Entry) -> tuple[int, bytes] | None:
        """``(version, value)`` of an index entry, reading the value if it is not in memory;
        None if a compaction moved the value meanwhile and the key is gone since."""
        for _ in range(3):  # each retry follows a compaction that moved the value
            version, stored = entry
            if isinstance(stored, bytes):
                return version, stored
            try:
                return version, await read_exact(
                    self._store, t.name, version + HEAD_SIZE + len(key), stored
                )
            except SegmentTruncated:
                current = t.index.get(key)
                if current is None:
                    return None
                entry = current
        raise StorageUnavailable(t.name, "a value kept moving under the read; retry")


def _check_condition(name: str, condition: int) -> None:
    if condition < NOT_EXISTS and condition != NO_VERSION:
        raise IllegalTableArgument(name, f"bad key version {condition}")
