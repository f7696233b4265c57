# A segment container: the segments whose names hash to it, with their log, metadata, read
# cache and chunk files. Containers share nothing mutable with each other.
#
# Contract (see api.py for the caller-facing rules).
# * Operations are validated against pending state and given their log sequence number
#   synchronously, in call order; their records are appended to ``_buf`` and their
#   completion to ``_ops``. Nothing touches the disk on the event loop.
# * The commit loop (commit.py) takes everything queued, hands it to the log thread
#   as ONE write (+ ONE fdatasync in fsync mode "always") and, when that returns, applies
#   the whole batch to the committed state in log order: lengths, attributes, read cache,
#   waiters, then the futures. Only one batch is on its way to disk at a time, so the
#   committed state is always a prefix of the log.
# * If the write fails, that batch and everything queued behind it (validated against state
#   that now will not exist) fail with StorageUnavailable, pending state is rolled back to
#   committed, and sequence numbers restart after the last durable record; the log writer
#   has already moved to a fresh file, so nothing after garbage is ever acknowledged.
# * Any other error while a batch is sent or a durable one applied is an internal error: the
#   container stops (commit.py's header). Calls then fail with StorageUnavailable saying so
#   (``_unavailable``); the log stays whole, and a restart recovers the container from it.
# * The storage writer (``_flush``) copies committed data from the read cache into chunk
#   files off the loop; the checkpointer snapshots metadata at a durable sequence number S,
#   flushes and fsyncs the chunk files, writes the checkpoint, and only then deletes log
#   files holding nothing after S and chunk files made garbage by records up to S.
# * Reads (cache, chunk files, parked tail reads) are container_reads.py's job.
from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Mapping, Sequence

from . import records as R
from .api import (
    ATTRIBUTE_SEGMENT_TYPE,
    SEGMENT_TYPE_TRANSIENT,
    AppendResult,
    AppendTooLarge,
    AttributeUpdate,
    AttributeUpdateType,
    BadAttributeUpdate,
    BadOffset,
    InvalidOffset,
    SegmentDamaged,
    SegmentExists,
    SegmentInfo,
    SegmentNotFound,
    SegmentSealed,
    StorageError,
    StoreOverloaded,
)
from .container_reads import ContainerReads
from .container_state import (
    _APPEND_HEAD_PACK,
    _CRC_PACK,
    _EC,
    _I64_MAX,
    _I64_MIN,
    _NULL,
    _U32_MAX,
    _WRITEV_MIN,
    _crc,
    _crc_extend,
)
from .metadata import SegmentMeta
from .operations import (
    Create,
    Delete,
    Duplicate,
    Merge,
    Operation,
    Seal,
    Truncate,
    UpdateAttributes,
)
from .recovery import recover
from .wal import FaultHook

log = logging.getLogger("segmentstore.storage")


class SegmentContainer(ContainerReads):
    # ------------------------------------------------------------------ lifecycle

    async def preflight(self) -> None:
        """Raise what ``start`` would refuse to start with (``StoreCorrupted``), changing
        nothing on disk: recovery's dry run, the one ``segmentstore check`` does, with its
        log lines held back (``start`` says them). The store runs it for every container
        before any of them starts, because recovery cuts checksums, drops chunk files the
        checkpoint does not cover and writes replayed data before it reaches damage further
        on in the log: a refused start must leave the directory as it found it."""
        await self._loop.run_in_executor(self._io_exec, _dry_run, self)

    def abandon(self) -> None:
        """Stop the threads of a container that will not start (idempotent)."""
        self._log_thread.shutdown()
        self._io_exec.shutdown()
        self._chunks.close()

    async def start(self) -> float:
        """Recover from disk and start the background tasks; returns recovery seconds."""
        t0 = time.perf_counter()
        try:
            rec = await self._loop.run_in_executor(
                self._io_exec, recover, self.dir, self._chunks, self.label, self.config.fsync
            )
        except BaseException:
            self.abandon()
            raise
        self._segments = rec.segments
        self._next_seq = self._batch_first_seq = rec.next_seq
        self._committed_seq = rec.next_seq - 1
        self._next_segment_id = rec.next_segment_id
        self._pending_deletes = rec.pending_deletes
        self._dirty_chunks = rec.dirty_chunks
        await self._log_thread.run(self._wal.start, rec.next_log_index, rec.prev_valid_len)
        if self._wal.spare_wanted:
            # The first log file should already be preallocated (see WalWriter.prepare_spare).
            try:
                await self._loop.run_in_executor(self._io_exec, self._wal.prepare_spare)
            except OSError as exc:
                log.warning("%s: could not preallocate a log file: %s", self.label, exc)
        self._log_index_at_commit = rec.next_log_index
        # Replayed log bytes count toward the next checkpoint, which then shortens recovery.
        self._log_bytes_at_ckpt = -rec.log_bytes
        seconds = time.perf_counter() - t0
        self.stats["recovered_records"] = rec.records
        self.stats["recovered_log_bytes"] = rec.log_bytes
        log.info(
            "%s recovered in %.3f s: checkpoint at record %d, replayed %d records "
            "(%d log bytes), %d segments, next record %d%s",
            self.label,
            seconds,
            rec.checkpoint_seq,
            rec.records,
            rec.log_bytes,
            len(self._segments),
            rec.next_seq,
            f", {len(rec.problems)} problem(s)" if rec.problems else "",
        )
        self._tasks.append(asyncio.create_task(self._writer_loop(), name=f"{self.label} log"))
        self._tasks.append(
            asyncio.create_task(self._storage_loop(), name=f"{self.label} storage writer")
        )
        if self.config.fsync == "interval":
            self._tasks.append(
                asyncio.create_task(self._interval_sync_loop(), name=f"{self.label} sync")
            )
        return seconds

    async def close(self) -> None:
        if self._closed:
            return
        self._closing = True
        self._wake_writer()
        writer, storage, *rest = self._tasks
        await writer
        self._kick_flush()
        await storage
        for task in rest:
            task.cancel()
        for task in rest:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._spare_job is not None:
            with contextlib.suppress(OSError):
                await self._spare_job
        try:
            await self._checkpoint()
        finally:
            await self._log_thread.run(self._wal.close)
            w = self._wal
            log.debug(
                "%s: log files zero-filled %d, recycled %d, created empty %d, deleted %d",
                self.label,
                w.files_zero_filled,
                w.files_recycled,
                w.files_created,
                w.files_deleted,
            )
            self._log_thread.shutdown()
            self._io_exec.shutdown()
            self._chunks.close()
            self._closed = True
            for seg in self._segments.values():
                seg.wake_waiters(True)

    def set_fault_hook(self, hook: FaultHook | None) -> None:
        self._wal.fault = hook
        self._chunks.fault = hook

    # ------------------------------------------------------------------ lookups

    def _pending(self, name: str) -> SegmentMeta:
        if self._closing:
            raise self._unavailable(name)
        seg = self._segments.get(name)
        if seg is None or seg.p_deleted:
            raise SegmentNotFound(name)
        return seg

    def exists(self, name: str) -> bool:
        seg = self._segments.get(name)
        return seg is not None and seg.created and not seg.deleted

    def info(self, name: str) -> SegmentInfo:
        seg = self._committed(name)
        attrs = {uuid.UUID(int=k): v for k, v in seg.all_attrs().items()}
        return SegmentInfo(
            name=name,
            length=seg.length,
            start_offset=seg.start_offset,
            sealed=seg.sealed,
            deleted=False,
            last_modified_ms=seg.last_modified_ms,
            segment_type=seg.segment_type,
            attributes=attrs,
        )

    def segment_names(self) -> list[str]:
        return [n for n, s in self._segments.items() if s.created and not s.deleted]

    def get_attribute(self, name: str, attribute_id: uuid.UUID) -> int:
        seg = self._committed(name)
        value = seg.get_attr(attribute_id.int)
        if value == _NULL and attribute_id == ATTRIBUTE_SEGMENT_TYPE:
            return seg.segment_type
        return value

    # ------------------------------------------------------------------ the queue

    def _enqueue(self, op: Operation) -> None:
        """Give ``op`` the next sequence number and queue its record for the commit loop."""
        seq = op.seq = self._next_seq
        self._next_seq = seq + 1
        self._buf += R.encode(seq, op.RTYPE, op.body())
        self._ops.append(op)
        self._kick()

    def append(
        self,
        name: str,
        data: bytes | bytearray | memoryview,
        writer_id: uuid.UUID | None,
        event_number: int | None,
        event_count: int,
        expected_offset: int | None,
    ) -> asyncio.Future[AppendResult]:
        fut: asyncio.Future[AppendResult] = self._loop.create_future()
        seg = self._segments.get(name)
        if seg is None or seg.p_deleted:
            fut.set_exception(SegmentNotFound(name))
            return fut
        if seg.p_sealed:
            fut.set_exception(SegmentSealed(name))
            return fut
        if seg.damaged is not None:
            fut.set_exception(SegmentDamaged(name, seg.damaged))
            return fut
        if self._closing:
            fut.set_exception(self._unavailable(name))
            return fut
        n = len(data)
        if n > self._max_append:
            fut.set_exception(AppendTooLarge(name, f"{n} bytes, limit {self._max_append}"))
            return fut
        wid = None
        if writer_id is not None and event_number is not None:
            wid = writer_id.int
            if wid == _EC:
                # Kept apart from the attributes (metadata.py): as a writer's number it
                # would be two values at once, and events would be taken for duplicates.
                fut.set_exception(InvalidOffset(name, "writer id is the EVENT_COUNT attribute"))
                return fut
            # seg.pending_attr(wid), inlined for a writer id (not the event-count key)
            p_attrs = seg.p_attrs
            if p_attrs is not None and wid in p_attrs:
                last = p_attrs[wid]
            else:
                attrs = seg.attrs
                last = _NULL if attrs is None else attrs.get(wid, _NULL)
            if event_number <= last:
                self.stats["duplicates"] += 1
                if seg.inflight:
                    # The original may still be on its way to disk: answer after it.
                    self._ops.append(Duplicate(seg, fut))
                    self._kick()
                else:
                    fut.set_result(AppendResult(seg.length, True))
                return fut
        offset = seg.p_length
        if expected_offset is not None and expected_offset != offset:
            fut.set_exception(BadOffset(name, expected_offset, offset))
            return fut
        if seg.p_ec + event_count > _I64_MAX:
            # EVENT_COUNT may have been set near the top: past it no checkpoint could hold it.
            fut.set_exception(
                InvalidOffset(name, f"event count {seg.p_ec} + {event_count} overflows")
            )
            return fut
        pending = self._pending_bytes
        used = pending.used
        if n and used + n > pending.limit and used > 0:  # pending.try_take(n), inlined
            fut.set_exception(StoreOverloaded(name, f"{used} bytes wait for the disk"))
            return fut
        pending.used = used + n
        if type(data) is not bytes:
            data = bytes(data)  # the caller may reuse its buffer once we return
        seq = self._next_seq
        try:
            if wid is None:
                head = _APPEND_HEAD_PACK(29 + n, seq, R.APPEND, seg.id, offset, event_count)
            else:
                assert writer_id is not None and event_number is not None
                head = R.APPEND_W_HEAD.pack(
                    53 + n,
                    seq,
                    R.APPEND_W,
                    seg.id,
                    offset,
                    event_count,
                    wid.to_bytes(16, "big"),  # writer_id.bytes without its Python call
                    event_number,
                )
        except Exception as exc:  # struct.error: a count or number out of its range
            pending.release(n)
            fut.set_exception(InvalidOffset(name, f"bad event number or count: {exc}"))
            return fut
        self._next_seq = seq + 1
        buf = self._buf
        buf += _CRC_PACK(_crc_extend(_crc(head), data))
        buf += head
        if n < _WRITEV_MIN:
            buf += data
        else:
            self._parts.append(buf)
            self._parts.append(data)
            self._buf = bytearray()
        if wid is not None:
            if p_attrs is None:
                seg.set_pending_attr(wid, event_number)  # type: ignore[arg-type]
            else:
                p_attrs[wid] = event_number  # type: ignore[assignment]
        seg.p_ec += event_count
        seg.p_length = offset + n
        seg.inflight += 1
        self._ops.append((seg, data, offset + n, fut, wid, event_number, event_count))
        if self._in_log is None and not self._send_soon:  # self._kick(), inlined
            self._send_soon = True
            self._loop.call_soon(self._send_queued)
        return fut

    async def create_segment(
        self, name: str, segment_type: int, attributes: Mapping[uuid.UUID, int] | None
    ) -> None:
        if self._closing:
            raise self._unavailable(name)
        old = self._segments.get(name)
        if old is not None and not old.p_deleted:
            raise SegmentExists(name)
        attrs = {}
        for key, value in (attributes or {}).items():
            _check_i64(name, value)
            if value != _NULL:
                attrs[key.int] = value
        if not 0 <= segment_type <= _U32_MAX:
            raise InvalidOffset(name, f"bad segment type {segment_type}")
        seg_id = self._next_segment_id
        self._next_segment_id += 1
        seg = SegmentMeta(name, seg_id, segment_type, int(time.time() * 1000))
        self._segments[name] = seg
        seg.inflight = 1
        seg.p_ec = attrs.get(_EC, 0)
        seg.p_attrs = {k: v for k, v in attrs.items() if k != _EC} or None
        fut: asyncio.Future[None] = self._loop.create_future()
        self._enqueue(Create(seg, attrs, fut=fut))
        await fut

    async def seal(self, name: str) -> int:
        seg = self._pending(name)
        if seg.p_sealed:
            raise SegmentSealed(name)
        seg.p_sealed = True
        seg.inflight += 1
        fut: asyncio.Future[int] = self._loop.create_future()
        self._enqueue(Seal(seg, fut=fut))
        return await fut

    async def truncate(self, name: str, offset: int) -> None:
        seg = self._pending(name)
        if not seg.p_start <= offset <= seg.p_length:
            raise InvalidOffset(
                name, f"truncate to {offset} outside [{seg.p_start}, {seg.p_length}]"
            )
        if offset == seg.p_start:
            return
        seg.p_start = offset
        seg.inflight += 1
        fut: asyncio.Future[None] = self._loop.create_future()
        self._enqueue(Truncate(seg, offset, fut=fut))
        await fut

    async def delete(self, name: str) -> None:
        seg = self._pending(name)
        seg.p_deleted = True
        seg.inflight += 1
        fut: asyncio.Future[None] = self._loop.create_future()
        self._enqueue(Delete(seg, fut=fut))
        await fut

    async def update_attributes(self, name: str, updates: Sequence[AttributeUpdate]) -> None:
        seg = self._pending(name)
        if seg.p_sealed:
            raise SegmentSealed(name)
        values: dict[int, int] = {}
        for u in updates:
            key = u.attribute_id.int
            _check_i64(name, u.value)
            current = values[key] if key in values else seg.pending_attr(key)
            t = u.update_type
            if t == AttributeUpdateType.REPLACE:
                new = u.value
            elif t == AttributeUpdateType.NONE:
                if current != _NULL:
                    raise BadAttributeUpdate(name, f"attribute {u.attribute_id} already set")
                new = u.value
            elif t == AttributeUpdateType.REPLACE_IF_GREATER:
                if current != _NULL and u.value <= current:
                    raise BadAttributeUpdate(
                        name, f"attribute {u.attribute_id}: {u.value} is not above {current}"
                    )
                new = u.value
            elif t == AttributeUpdateType.ACCUMULATE:
                new = (0 if current == _NULL else current) + u.value
                if not _I64_MIN < new <= _I64_MAX:
                    raise BadAttributeUpdate(name, f"attribute {u.attribute_id} overflows")
            elif t == AttributeUpdateType.REPLACE_IF_EQUALS:
                if current != u.compare_value:
                    raise BadAttributeUpdate(
                        name,
                        f"attribute {u.attribute_id} is {current}, expected {u.compare_value}",
                    )
                new = u.value
            else:
                raise BadAttributeUpdate(name, f"unknown update type {t}")
            values[key] = new
        if not values:
            return
        for key, value in values.items():
            seg.set_pending_attr(key, value)
        seg.inflight += 1
        fut: asyncio.Future[None] = self._loop.create_future()
        self._enqueue(UpdateAttributes(seg, values, fut=fut))
        await fut

    async def merge(self, target: str, source: str) -> int:
        if target == source:
            raise InvalidOffset(source, "cannot merge a segment into itself")
        t = self._pending(target)
        s = self._pending(source)
        if t.p_sealed:
            raise SegmentSealed(target)
        if not s.p_sealed:
            with contextlib.suppress(SegmentSealed):
                await self.seal(source)
        elif s.inflight:
            # Sealed (or truncated) by a call not durable yet: the bytes read below must
            # include every append accepted before it, and leave out what it cuts.
            await self._applied_so_far(s)
        if self._committed(source) is not s:
            raise SegmentNotFound(source)
        parts: list[bytes | memoryview] = []
        pos = s.start_offset
        while pos < s.length:
            r = await self.read(source, pos, s.length - pos)
            parts.append(r.data)
            pos += len(r.data)
        data = b"".join(parts)
        # Re-check: other calls ran while we read.
        t = self._pending(target)
        if t.p_sealed:
            raise SegmentSealed(target)
        if self._segments.get(source) is not s or s.p_deleted:
            raise SegmentNotFound(source)
        if len(data) > R.MAX_RECORD_SIZE - 64:
            raise InvalidOffset(source, f"{len(data)} bytes is too large to merge")
        delta = 1 if s.segment_type & SEGMENT_TYPE_TRANSIENT else max(0, s.pending_attr(_EC))
        ec = t.pending_attr(_EC)
        ec = (0 if ec == _NULL else ec) + delta
        if ec > _I64_MAX:
            raise InvalidOffset(target, f"event count {ec - delta} + {delta} overflows")
        if data and not self._pending_bytes.try_take(len(data)):
            raise StoreOverloaded(target, f"{self._pending_bytes.used} bytes wait for the disk")
        offset = t.p_length
        end = offset + len(data)
        t.set_pending_attr(_EC, ec)
        t.p_length = end
        s.p_deleted = True
        t.inflight += 1
        s.inflight += 1
        fut: asyncio.Future[int] = self._loop.create_future()
        self._enqueue(Merge(t, s, offset, data, delta, fut=fut))
        return await fut

    async def _applied_so_far(self, seg: SegmentMeta) -> None:
        """Wait until everything queued so far is applied: a Duplicate carries no record and
        is answered in queue order (StorageUnavailable if a batch before it fails)."""
        fut: asyncio.Future[AppendResult] = self._loop.create_future()
        self._ops.append(Duplicate(seg, fut))
        self._kick()
        await fut

    # ------------------------------------------------------------------ stats

    def gauges(self) -> dict[str, float]:
        return {
            "segments": float(len(self._segments)),
            "cache_bytes": float(self._cache.size),
            "unflushed_bytes": float(self._unflushed),
            "queued_records": float(len(self._ops)),
            "queued_bytes": float(len(self._buf) + sum(len(p) for p in self._parts)),
            "log_bytes": float(self._wal.bytes_written),
            "fsyncs": float(self._wal.fsyncs),
            # 1 per container whose log has the native write lane (log_thread.py).
            "native_log_lane": float(self._log_thread.native),
            "native_log_fallbacks": float(self._log_thread.native_fallbacks),
            "log_bytes_since_checkpoint": float(
                self._log_bytes_at_commit - self._log_bytes_at_ckpt
            ),
        }


def _check_i64(name: str, value: int) -> None:
    if not _I64_MIN <= value <= _I64_MAX:
        raise BadAttributeUpdate(name, f"attribute value {value} is not a 64-bit integer")


__all__ = ["SegmentContainer", "StorageError"]


class _OtherThreads(logging.Filter):
    """Drops the records of the thread that made it (a dry run's repeat of start's lines)."""

    def __init__(self) -> None:
        super().__init__()
        self.thread = threading.get_ident()

    def filter(self, record: logging.LogRecord) -> bool:
        return record.thread != self.thread


def _dry_run(container: SegmentContainer) -> None:
    quiet = _OtherThreads()
    log.addFilter(quiet)
    try:
        recover(container.dir, container._chunks, container.label, container.config.fsync, True)
    finally:
        log.removeFilter(quiet)
