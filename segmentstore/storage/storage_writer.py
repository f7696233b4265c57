# The storage writer of a container: committed data from the read cache into chunk files, and
# metadata checkpoints.
#
# Contract. ``_flush`` copies committed bytes of dirty segments into chunk files off the loop
# (a segment marked damaged is skipped: its files cannot take them). A pass of the flush
# timer writes only the segments that are due (``_due``: segment_flush_bytes waiting, or
# dirty for flush_small_every passes); every other flush (kicked by a store-wide bound, the
# memory limit, a checkpoint, close) writes every dirty segment. The log holds everything
# committed until a checkpoint, and a checkpoint flushes all, so this only delays copies. ``_checkpoint``
# snapshots metadata at a durable sequence number S, flushes, fdatasyncs every chunk file
# and checksum sidecar written since the last checkpoint, writes the checkpoint, and only
# then deletes log files holding nothing after S and chunk files made garbage by records up
# to S. Both hold ``_flush_lock``; neither ever runs on a worker thread itself.
from __future__ import annotations

import logging
import time

from . import checkpoint as ckpt_mod
from .chunks import ALIGN, ChunkId
from .container_state import ContainerState, _set_result
from .metadata import SegmentMeta
from .operations import Delete, Merge

log = logging.getLogger("segmentstore.storage")


class StorageWriter(ContainerState):
    async def _storage_loop(self) -> None:
        loop = self._loop
        interval = self.config.flush_interval_s
        while not self._closing:
            self._flush_wake = loop.create_future()
            handle = loop.call_later(interval, _set_result, self._flush_wake)
            try:
                await self._flush_wake
            finally:
                handle.cancel()
                self._flush_wake = None
            if self._closing:
                return
            everything, self._flush_all = self._flush_all, False
            try:
                await self._flush(everything)
                if (
                    self._log_bytes_at_commit - self._log_bytes_at_ckpt
                    >= self.config.checkpoint_log_bytes
                ):
                    await self._checkpoint()
            except Exception:
                log.exception("%s: storage writer pass failed", self.label)

    async def _flush(self, everything: bool = True) -> bool:
        async with self._flush_lock:
            return await self._flush_locked(everything)

    async def _flush_locked(self, everything: bool = True) -> bool:
        """Copy committed data of dirty segments (every one, or only those ``_due``) into
        chunk files; False if I/O failed."""
        if everything:
            segs = list(self._dirty)
            self._dirty.clear()
            self._dirty_passes.clear()
        else:
            segs = self._due()
        jobs: list[tuple[SegmentMeta, int, int, list[bytes | memoryview]]] = []
        direct = self._chunks.direct
        for seg in segs:
            start, end = seg.flushed, seg.length
            if seg.deleted or end <= start or seg.damaged is not None:
                continue
            cache = seg.cache
            assert cache is not None and cache.start <= start
            if direct and cache.start <= start - start % ALIGN:
                # Direct writes cover whole blocks: hand over the block's flushed head too,
                # so the chunk store need not read it back from the file.
                start -= start % ALIGN
            jobs.append((seg, start, end, cache.pieces(start, end)))
        if not jobs:
            return True
        work = [(seg.id, start, pieces) for seg, start, _, pieces in jobs]
        try:
            touched = await self._loop.run_in_executor(self._io_exec, self._write_chunks, work)
        except OSError as exc:
            log.error("%s: writing chunk files failed: %s", self.label, exc)
            self._dirty.update(seg for seg, _, _, _ in jobs if not seg.deleted)
            return False
        self._dirty_chunks |= touched
        written = 0
        for seg, _, end, _ in jobs:
            if end > seg.flushed:
                self._unflushed -= end - seg.flushed
                written += end - seg.flushed
                seg.flushed = end
        self.stats["flushes"] += 1
        self.stats["flushed_bytes"] += written
        self._cache.evict()
        return True

    def _due(self) -> list[SegmentMeta]:
        """The dirty segments a timer pass writes, taken out of ``_dirty``: those with
        segment_flush_bytes unflushed, or seen dirty by flush_small_every passes. The others
        stay dirty, their passes counted."""
        big = self.config.segment_flush_bytes
        every = self.config.flush_small_every
        passes = self._dirty_passes
        due = []
        for seg in self._dirty:
            n = passes.get(seg, 0) + 1
            if n >= every or seg.length - seg.flushed >= big:
                due.append(seg)
                passes.pop(seg, None)
            else:
                passes[seg] = n
        self._dirty.difference_update(due)
        return due

    def _write_chunks(self, work: list[tuple[int, int, list[bytes | memoryview]]]) -> set[ChunkId]:
        touched: set[ChunkId] = set()
        for seg_id, offset, pieces in work:
            touched |= self._chunks.write(seg_id, offset, pieces)
        return touched

    async def _checkpoint(self) -> bool:
        """Checkpoint metadata at the last durable record; then drop what it makes garbage."""
        async with self._flush_lock:
            if self._stopped is not None:
                # Its state may be half a batch (commit.py): the log is the truth, and the
                # next start replays it from the last checkpoint.
                log.warning("%s: no checkpoint: %s", self.label, self._stopped)
                return False
            t0 = time.perf_counter()
            seq = self._committed_seq
            log_index = self._log_index_at_commit
            log_bytes = self._log_bytes_at_commit
            segs = [s for s in self._segments.values() if s.created and not s.deleted]
            segs += self._renamed_away()
            snapshot = [
                ckpt_mod.SegmentRecord(
                    s.id,
                    s.name,
                    s.segment_type,
                    s.sealed,
                    s.length,
                    s.start_offset,
                    s.last_modified_ms,
                    s.all_attrs(),
                )
                for s in segs
            ]
            ckpt = ckpt_mod.Checkpoint(seq, self._next_segment_id, snapshot)
            if not await self._flush_locked():
                return False
            for seg, rec in zip(segs, snapshot, strict=True):
                if seg.flushed < rec.length and not seg.deleted and seg.damaged is None:
                    log.error("%s: checkpoint skipped, %s not flushed", self.label, seg.name)
                    return False
            dirty = self._dirty_chunks
            self._dirty_chunks = set()
            try:
                await self._loop.run_in_executor(self._io_exec, self._write_checkpoint, dirty, ckpt)
            except OSError as exc:
                self._dirty_chunks |= dirty
                log.error("%s: checkpoint failed: %s", self.label, exc)
                return False
            self._log_bytes_at_ckpt = log_bytes
            deletes = [d for d in self._pending_deletes if d[0] <= seq]
            self._pending_deletes = [d for d in self._pending_deletes if d[0] > seq]
            try:
                removed = await self._log_thread.run(self._wal.delete_files_before, log_index)
                await self._loop.run_in_executor(self._io_exec, self._delete_chunks, deletes)
            except OSError as exc:
                # Harmless leftovers: recovery skips old log files and deletes stray chunks.
                log.warning("%s: cleanup after checkpoint failed: %s", self.label, exc)
                removed = 0
            seconds = time.perf_counter() - t0
            self.stats["checkpoints"] += 1
            self.stats["last_checkpoint_seconds"] = seconds
            log.debug(
                "%s: checkpoint at record %d (%d segments) in %.3f s; %d log files removed",
                self.label,
                seq,
                len(snapshot),
                seconds,
                removed,
            )
            return True

    def _renamed_away(self) -> list[SegmentMeta]:
        """Committed segments whose name a create took over while their delete (or the merge
        that deletes them) is queued or on its way: no ``_segments`` entry holds them, yet
        they are committed state, and back if that record fails."""
        ops = self._ops if self._in_log is None else [*self._in_log[1], *self._ops]
        found: dict[int, SegmentMeta] = {}
        for op in ops:
            if isinstance(op, Delete | Merge):
                seg = op.source if isinstance(op, Merge) else op.seg
                if seg.created and not seg.deleted and self._segments.get(seg.name) is not seg:
                    found[seg.id] = seg
        return list(found.values())

    def _write_checkpoint(self, dirty: set[ChunkId], ckpt: ckpt_mod.Checkpoint) -> None:
        self._chunks.sync(dirty)
        self._hook_checkpoint()
        ckpt_mod.write(self.dir, ckpt)

    def _hook_checkpoint(self) -> None:
        if self._chunks.fault is not None:
            self._chunks.fault("checkpoint.write")

    def _delete_chunks(self, deletes: list[tuple[int, int, int, int]]) -> None:
        for _, seg_id, first, last in deletes:
            self._chunks.delete(seg_id, first, last)
