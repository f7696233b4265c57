# The commit loop of a container: group commit of queued records to the log, then applying
# durable batches to the committed state.
#
# Contract. Everything queued is handed to the log thread as ONE write (+ ONE fdatasync in
# fsync mode "always") and, when that returns (in the log thread's eventfd callback,
# ``_written``), the whole batch is applied to the committed state in log order: lengths,
# attributes, read cache, waiters, then the futures. Only one batch is on its way to disk at
# a time, so the committed state is always a prefix of the log. If the write fails
# (``_write_failed``, in the same callback), that batch and everything queued behind it
# fail with StorageUnavailable, pending state is rolled back to committed and sequence
# numbers restart after the last durable record.
# Who sends a batch (round 10): with one on its way, ``_written`` sends the next; with none,
# the first record queued schedules ONE ``call_soon(_send_queued)`` (``_kick``), which runs
# after every socket read of the loop turn was handled, so all that a turn queued goes as
# one batch, with no task step. The writer task (``_writer_loop``) is only woken for the
# slow paths: over the unflushed-memory bound, and closing.
# In fsync mode "always" a batch goes to the log thread's native lane when the log allows it
# (``WalWriter.dsync_target``; log_thread.py): the same one batch on its way, the same
# ``_written``, with the log's end advanced first (``_written_native``).
from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import Any

from .api import (
    AppendResult,
    StorageUnavailable,
)
from .metadata import SegmentMeta
from .operations import Duplicate, Merge, Queued
from .read_cache import FREEZE, OWN_BLOCK
from .stages import STAGES, timed_write
from .storage_writer import StorageWriter

log = logging.getLogger("segmentstore.storage")


class CommitLoop(StorageWriter):
    async def _writer_loop(self) -> None:
        """The commit loop's slow paths: the memory bound, and closing.

        Batches are sent by ``_send_queued`` (none on its way) and ``_written`` (the next
        one, from the eventfd callback of the durable one): the disk never waits for a
        loop turn, and acks are queued before the loop polls its sockets again. This task
        is woken (``_wake_writer``) when records wait while the unflushed data is over its
        bound, and when the store closes; it returns once closing with nothing queued and
        nothing on its way.
        """
        loop = self._loop
        while True:
            if self._in_log is None and self._ops:
                # Memory bound: committed data waits in the cache until it is in chunk
                # files, so stop committing (acks wait) while too much of it is unflushed.
                if self._unflushed <= self._max_unflushed:
                    self._send_batch()
                elif not await self._flush():
                    # Disk full or failing: nothing leaves memory, so nothing more may
                    # come in. Fail what waits (retriable) rather than grow without bound.
                    self._fail_all([], "cannot write chunk files, too much data in memory")
                    await asyncio.sleep(0.05)
                continue
            if self._closing and self._in_log is None:
                return
            self._wake = loop.create_future()
            await self._wake
            self._wake = None

    def _kick(self) -> None:
        """Records were queued: with no batch on its way, send them from one ``call_soon``
        per turn (``_send_queued``; the append path inlines this)."""
        if self._in_log is None and not self._send_soon:
            self._send_soon = True
            self._loop.call_soon(self._send_queued)

    def _send_queued(self) -> None:
        """The ``call_soon`` of ``_kick``: send what the turn queued, unless a batch went
        meanwhile (its ``_written`` sends the rest) or the memory bound holds it back."""
        self._send_soon = False
        if self._in_log is not None or not self._ops:
            return
        if self._unflushed <= self._max_unflushed:
            self._send_batch()
        else:
            self._wake_writer()

    def _write_failed(self, ops: list[Queued], exc: BaseException) -> None:
        """On the loop, in the log thread's eventfd callback: the batch ``ops`` failed. It
        has no successor (``_written`` sends the next one only after a success), so it is
        still the one on its way."""
        self._in_log = None
        if not isinstance(exc, OSError):
            log.error("%s: unexpected error writing the log", self.label, exc_info=exc)
        self._fail_all(ops, f"log write failed: {exc}")
        if self._closing:
            self._wake_writer()

    def _send_batch(self) -> None:
        """Hand everything queued to the log thread as one write (``_in_log``); a batch of
        duplicates only (nothing to write) is applied at once instead."""
        ops = self._ops
        parts = self._parts
        if self._buf:
            parts.append(self._buf)
        first = self._batch_first_seq
        last = self._next_seq - 1
        self._ops = []
        self._parts = []
        self._buf = bytearray()
        self._batch_first_seq = self._next_seq
        if not parts:  # only duplicates waiting for earlier records, all applied by now
            self._commit(ops, self._committed_seq, *self._log_position(), 0.0)
            if self._closing:
                self._wake_writer()
            return
        lt = self._log_thread
        then = functools.partial(self._written, ops, last)
        failed = functools.partial(self._write_failed, ops)
        args = (self._wal.write_batch, parts, first, time.perf_counter())
        # The native lane (log_thread.py) when the log allows it (wal.dsync_target); if it
        # fails, the log thread runs the very same job instead.
        nbytes = sum(map(len, parts)) if lt.native_ready else 0
        target = self._wal.dsync_target(nbytes) if nbytes else None
        if target is not None:
            native_then = functools.partial(self._written_native, ops, last, nbytes)
            fd, pos = target
            write = lt.run_dsync(
                fd, pos, parts, nbytes, native_then, timed_write, *args, then=then, failed=failed
            )
        else:
            write = lt.run(timed_write, *args, then=then, failed=failed)
        self._in_log = (write, ops)

    def _log_position(self) -> tuple[int, int]:
        return self._wal.current_index, self._wal.bytes_written

    def _written_native(
        self, ops: list[Queued], last: int, nbytes: int, timing: tuple[float, ...]
    ) -> None:
        """``_written`` for a batch the native lane made durable: the log's position first."""
        self._wal.dsync_written(nbytes)
        self.stats["native_log_batches"] += 1
        self._written(ops, last, timing)

    def _written(self, ops: list[Queued], last: int, timing: tuple[float, ...]) -> None:
        """On the loop, in the log thread's eventfd callback: the batch ``ops`` is durable.

        The log thread has no other write in hand (one batch at a time), so the log's
        position read first is the one just after this batch; then the next batch goes
        out, then this one is applied (the disk works while the loop applies)."""
        perf = time.perf_counter
        sync_s, handoff_in, write_s, done_at = timing
        STAGES.observe_commit(perf() - done_at, handoff_in, write_s, sync_s)
        position = self._log_position()
        self._in_log = None
        # Something to write, within the memory bound: send it now. Otherwise duplicates
        # only go through ``_send_queued`` (applied at once, after this batch), and over
        # the bound the writer task flushes first; closing, it may return.
        if self._ops:
            if (self._parts or self._buf) and self._unflushed <= self._max_unflushed:
                self._send_batch()
            else:
                self._kick()
        elif self._closing:
            self._wake_writer()
        t1 = perf()
        self._commit(ops, last, *position, sync_s)
        STAGES.observe("apply", perf() - t1)

    def _commit(
        self,
        ops: list[Queued],
        last: int,
        log_index: int,
        log_bytes: int,
        sync_s: float,
    ) -> None:
        """A batch is durable: make it visible and complete its futures."""
        self._committed_seq = last
        self._log_index_at_commit = log_index
        self._log_bytes_at_commit = log_bytes
        self._apply(ops)
        stats = self.stats
        stats["batches"] += 1
        stats["last_batch_records"] = len(ops)
        stats["last_fsync_seconds"] = sync_s
        hook = self.on_commit
        if hook is not None:
            hook(len(ops), sync_s)
        if self._spare_job is None and self._wal.spare_wanted:
            self._spare_job = self._loop.run_in_executor(self._io_exec, self._wal.prepare_spare)
            self._spare_job.add_done_callback(self._spare_done)
        if (
            self._unflushed >= self.config.flush_bytes
            # Over budget, only flushing lets the cache evict; but not for every batch.
            or (self._unflushed >= self.config.flush_bytes // 4 and self._cache.over_budget())
            or (
                self._log_bytes_at_commit - self._log_bytes_at_ckpt
                >= self.config.checkpoint_log_bytes
            )
        ):
            self._kick_flush()

    def _spare_done(self, job: asyncio.Future[None]) -> None:
        self._spare_job = None
        if not job.cancelled() and job.exception() is not None:
            log.warning("%s: could not preallocate a log file: %s", self.label, job.exception())

    def _fail_all(self, ops: list[Queued], reason: str) -> None:
        """The batch ``ops`` did not reach the disk: fail it and everything queued after it."""
        failed = ops + self._ops
        self._ops = []
        self._parts = []
        self._buf = bytearray()
        self._next_seq = self._batch_first_seq = self._committed_seq + 1
        self.stats["failed_batches"] += 1
        log.error("%s: %s; failing %d operations", self.label, reason, len(failed))
        touched: dict[int, SegmentMeta] = {}
        released = 0
        for op in failed:
            fut: asyncio.Future[Any] | None
            if type(op) is tuple:
                seg, data, _, fut, _, _, _ = op
                released += len(data)
            else:
                assert not isinstance(op, tuple)
                seg, fut = op.seg, op.fut
                if isinstance(op, Merge):
                    released += len(op.data)
                    touched[id(op.source)] = op.source
            touched[id(seg)] = seg
            if fut is not None and not fut.done():
                fut.set_exception(StorageUnavailable(seg.name, reason))
        self._pending_bytes.release(released)
        segs = list(touched.values())
        for seg in segs:
            if not seg.created and self._segments.get(seg.name) is seg:
                del self._segments[seg.name]
        for seg in segs:
            seg.reset_pending()
            if seg.created and not seg.deleted and seg.name not in self._segments:
                self._segments[seg.name] = seg

    def _apply(self, ops: list[Queued]) -> None:
        """Make a durable batch visible, in log order, and complete its futures.

        Appends (tuples) inline ``operations.apply_append`` plus the read cache's
        small-append case: this loop runs per append. Everything else is ``op.apply``,
        the same rules recovery replays, with this container as its ``Effects``.
        """
        now_ms = int(time.time() * 1000)
        cache_add = self._cache.add
        dirty = self._dirty
        appended = 0
        cached = 0
        n_appends = 0
        self._merged = 0
        for op in ops:
            if type(op) is tuple:
                seg, data, end, fut, wid, event_number, event_count = op
                n = len(data)
                if n:
                    cache = seg.cache
                    if cache is None or n >= OWN_BLOCK:
                        cache_add(seg, data, end - n)
                    else:
                        # SegmentCache.add's small-append case, inlined: it runs per append.
                        tail = cache.tail
                        tail += data
                        cache.end = end
                        cached += n
                        if len(tail) >= FREEZE:
                            cache.freeze_tail()
                    appended += n
                    dirty.add(seg)
                seg.length = end
                n_appends += 1
                if wid is not None:
                    attrs = seg.attrs
                    if attrs is None:
                        seg.attrs = {wid: event_number}  # type: ignore[dict-item]
                    else:
                        attrs[wid] = event_number  # type: ignore[assignment]
                if event_count:
                    ec = seg.ec
                    seg.ec = event_count if ec is None else ec + event_count
                seg.last_modified_ms = now_ms
                seg.inflight -= 1
                if seg.inflight <= 0:
                    seg.inflight = 0
                    seg.p_attrs = None
                if seg.waiters is not None:
                    seg.wake_waiters(False)
                if not fut.done():
                    fut.set_result(AppendResult(end))
            elif type(op) is Duplicate:
                if not op.fut.done():
                    op.fut.set_result(AppendResult(op.seg.length, True))
            else:
                assert not isinstance(op, tuple | Duplicate)
                op.seg.op_committed()
                if isinstance(op, Merge):
                    op.source.op_committed()
                result = op.apply(now_ms, self)
                fut2 = op.fut
                if fut2 is not None and not fut2.done():
                    fut2.set_result(result)
        appended += self._merged
        self._unflushed += appended
        self._pending_bytes.release(appended)
        self._cache.size += cached
        stats = self.stats
        stats["appends"] += n_appends
        stats["append_bytes"] += appended

    # ------------------------------------------------------------------ operations.Effects

    @property
    def chunk_bytes(self) -> int:
        return self._chunks.chunk_bytes

    def on_data(self, seg: SegmentMeta, offset: int, data: bytes | memoryview) -> None:
        self._cache.add(seg, bytes(data), offset)
        self._dirty.add(seg)
        self._merged += len(data)

    def on_garbage(self, seq: int, seg_id: int, first_chunk: int, last_chunk: int) -> None:
        self._pending_deletes.append((seq, seg_id, first_chunk, last_chunk))

    def on_truncated(self, seg: SegmentMeta, offset: int) -> None:
        cache = seg.cache
        if cache is not None:
            self._cache.size -= cache.evict_below(min(offset, seg.flushed))
            if cache.size == 0:
                self._cache.drop(seg)

    def on_deleted(self, seg: SegmentMeta) -> None:
        if self._segments.get(seg.name) is seg:
            del self._segments[seg.name]
        self._cache.drop(seg)
        self._dirty.discard(seg)
        self._dirty_passes.pop(seg, None)
        self._unflushed -= seg.length - seg.flushed
        seg.flushed = seg.length

    def on_woken(self, seg: SegmentMeta, everyone: bool) -> None:
        if seg.waiters is not None:
            seg.wake_waiters(everyone)

    async def _interval_sync_loop(self) -> None:
        interval = self.config.fsync_interval_s
        while True:
            await asyncio.sleep(interval)
            try:
                await self._log_thread.run(self._wal.sync)
            except OSError as exc:
                log.error("%s: periodic log fsync failed: %s", self.label, exc)
