"""Scopes and streams: their lifecycle, scaling, truncation and the segment queries.

Contract: every mutation runs under its stream's lock and follows the same shape: first a
durable metadata record naming the operation (``pending``), then the segment-store calls
(each idempotent: creating an existing segment, sealing a sealed one and deleting a gone
one all count as done), then the record without ``pending``. ``recover()`` at startup
redoes every pending step, so a crash in the middle of a scale, seal, truncation or delete
finishes it; a store step that fails while running (disk full, I/O error:
``StorageUnavailable``) leaves its pending record for the next call on that stream or the
background ``finish_pending`` to finish, and the in-memory record changes only with the
durable one. ``createStream`` writes its record and creates its segments at once (one
group commit); ``recover()`` creates current segments a crash left missing. A request that fails validation changes nothing. Results are the names of
Pravega's status enum values (``"SUCCESS"``, ``"STREAM_NOT_SEALED"``...), which the gRPC
layer turns into numbers; ``BadRequest`` means the request itself is malformed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..storage import (
    CREATION_TIME,
    SegmentExists,
    SegmentNotFound,
    SegmentSealed,
    SegmentStore,
    StorageError,
    StorageUnavailable,
)
from .metadata import Metadata
from .model import (
    EpochRecord,
    SegmentRecord,
    StreamConfig,
    StreamRecord,
    covers_key_space,
    even_ranges,
    valid_name,
)

log = logging.getLogger("segmentstore.controller")

MAX_SEGMENTS = 1024  # per scale or creation; a bound against a request that asks for millions
MAX_TAGS, MAX_TAG_LENGTH = 128, 256  # Pravega's limits on a stream's tags
# A stream's record (every segment it ever had) is one metadata table value: a scale that
# would grow it past this is refused, else its pending record could never be finished.
MAX_RECORD_BYTES = 1_000_000  # under the table's value limit (1,040,384), with room to spare
LIST_PAGE = 100


class BadRequest(ValueError):
    """A request the controller refuses as malformed (gRPC INVALID_ARGUMENT)."""


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class ScaleEvent:
    scope: str
    stream: str
    epoch: int
    created: int
    sealed: int


class Streams:
    def __init__(self, store: SegmentStore, md: Metadata) -> None:
        self.store = store
        self.md = md
        self._locks: dict[str, asyncio.Lock] = {}
        self.scale_events = 0
        self.on_scale: Callable[[ScaleEvent], None] | None = None
        # Records of creations that failed half-way (disk full) whose removal failed too:
        # hidden from every call, removed durably by ``finish_pending``.
        self._unmade: dict[str, StreamRecord] = {}

    def lock(self, rec_key: str) -> asyncio.Lock:
        lock = self._locks.get(rec_key)
        if lock is None:
            lock = self._locks[rec_key] = asyncio.Lock()
        return lock

    def get(self, scope: str, stream: str) -> StreamRecord | None:
        return self.md.streams.get(f"{scope}/{stream}")

    # ------------------------------------------------------------------ scopes

    async def create_scope(self, scope: str) -> str:
        if not valid_name(scope):
            return "INVALID_SCOPE_NAME"
        if scope in self.md.scopes:
            return "SCOPE_EXISTS"
        await self.md.put_scope(scope, now_ms())
        return "SUCCESS"

    async def delete_scope(self, scope: str) -> str:
        if scope not in self.md.scopes:
            return "SCOPE_NOT_FOUND"
        if any(r.scope == scope for r in self.md.streams.values()) or any(
            t["scope"] == scope for t in self.md.objects["kvt"].values()
        ):
            return "SCOPE_NOT_EMPTY"  # streams (reader groups have one each) or tables
        await self.md.remove_scope(scope)
        return "SUCCESS"

    def list_scopes(
        self, token: str, visible: Callable[[str], bool] | None = None
    ) -> tuple[list[str], str]:
        """A page of scope names after ``token``; only ``visible`` ones (auth on)."""
        names = sorted(s for s in self.md.scopes if s > token)
        page = [n for n in names if visible is None or visible(n)][:LIST_PAGE]
        return page, page[-1] if page else token

    def list_streams(
        self, scope: str, token: str, visible: Callable[[str, str], bool] | None = None
    ) -> tuple[list[str], str]:
        names = sorted(  # internal streams (``_RG<group>``) are not listed, as in Pravega
            r.stream
            for r in self.md.streams.values()
            if r.scope == scope and not r.stream.startswith("_")
        )
        page = [n for n in names if n > token and (visible is None or visible(scope, n))]
        page = page[:LIST_PAGE]
        return page, page[-1] if page else token

    # ------------------------------------------------------------------ streams

    @staticmethod
    def check_config(cfg: StreamConfig) -> None:
        if cfg.scale_type not in (0, 1, 2):
            raise BadRequest(f"unknown scaling policy type {cfg.scale_type}")
        if not 1 <= cfg.min_segments <= MAX_SEGMENTS:
            raise BadRequest(f"minNumSegments must be 1..{MAX_SEGMENTS}, not {cfg.min_segments}")
        if cfg.scale_type and (cfg.target_rate <= 0 or cfg.scale_factor <= 0):
            raise BadRequest("a by-rate scaling policy needs targetRate > 0 and scaleFactor > 0")
        if cfg.tags is not None and (
            len(cfg.tags) > MAX_TAGS or any(len(t) > MAX_TAG_LENGTH for t in cfg.tags)
        ):
            raise BadRequest(f"at most {MAX_TAGS} tags of at most {MAX_TAG_LENGTH} characters")
        if cfg.retention_type not in (0, 1, 2):
            raise BadRequest(f"unknown retention policy type {cfg.retention_type}")
        if cfg.retention_type and cfg.retention_param < 0:
            raise BadRequest("retentionParam must not be negative")
        if cfg.retention_type and (
            cfg.retention_max < 0 or 0 < cfg.retention_max < cfg.retention_param
        ):
            raise BadRequest("retentionMax must be 0 (none) or at least retentionParam")

    async def create_stream(
        self, scope: str, stream: str, cfg: StreamConfig, internal: bool = False
    ) -> str:
        """``internal``: a name of the controller's own (``_RG<group>``), not checked."""
        if not internal and not valid_name(stream):
            return "INVALID_STREAM_NAME"
        if scope not in self.md.scopes:
            return "SCOPE_NOT_FOUND"
        self.check_config(cfg)
        async with self.lock(f"{scope}/{stream}"):
            if self.get(scope, stream) is not None:
                return "STREAM_EXISTS"
            t = now_ms()
            rec = StreamRecord(scope, stream, cfg, t)
            rec.epochs.append(EpochRecord(0, t, []))
            for lo, hi in even_ranges(cfg.min_segments):
                sid = rec.next_number
                rec.next_number += 1
                rec.segments[sid] = SegmentRecord(sid, lo, hi, t)
                rec.epochs[0].segments.append(sid)
            self._unmade.pop(rec.key, None)  # this creation writes the record anew
            # Segments and record together (one group commit); should the record outlive
            # its segments in a crash, ``recover`` creates the missing ones.
            results = await asyncio.gather(
                self._create_segments(rec, rec.epochs[0].segments, t),
                self.md.put_stream(rec),
                return_exceptions=True,
            )
            failed = [r for r in results if isinstance(r, BaseException)]
            if failed:  # disk full: no stream may stay listed without its segments
                await self._unmake(rec)
                raise failed[0]
        log.info("created stream %s/%s with %d segment(s)", scope, stream, cfg.min_segments)
        return "SUCCESS"

    async def update_stream(self, scope: str, stream: str, cfg: StreamConfig) -> str:
        if scope not in self.md.scopes:
            return "SCOPE_NOT_FOUND"
        self.check_config(cfg)
        async with self.lock(f"{scope}/{stream}"):
            rec = self.get(scope, stream)
            if rec is None:
                return "STREAM_NOT_FOUND"
            settled = await self._settle(rec)
            if settled is None:
                return "STREAM_NOT_FOUND"
            rec = settled
            if rec.state != "active":
                return "STREAM_SEALED"
            new = StreamRecord.from_json(rec.to_json())
            new.config = cfg
            count = self.resized(new)
            if count is None:
                await self.md.put_stream(new)
            else:
                # The new config and the scale to it go in one record, so a crash cannot
                # leave a config that disagrees with the segments (recover() finishes it).
                log.info(
                    "update of %s: %d segment(s) -> %d", rec.key, len(rec.current.segments), count
                )
                await self.scale_locked(new, list(new.current.segments), even_ranges(count))
        return "SUCCESS"

    @staticmethod
    def resized(rec: StreamRecord) -> int | None:
        """The segment count an updated config asks for, when it differs from the current
        one: as Pravega, a fixed policy means exactly ``minNumSegments``, a by-rate policy at
        least that many (auto-scaling handles the rest)."""
        have, want = len(rec.current.segments), rec.config.min_segments
        if have == want or (rec.config.scale_type and have > want):
            return None
        return want

    async def seal_stream(self, scope: str, stream: str) -> str:
        if scope not in self.md.scopes:
            return "SCOPE_NOT_FOUND"
        async with self.lock(f"{scope}/{stream}"):
            rec = self.get(scope, stream)
            if rec is None:
                return "STREAM_NOT_FOUND"
            # A seal whose segments a full disk left unsealed is finished before SUCCESS.
            settled = await self._settle(rec)
            if settled is None:
                return "STREAM_NOT_FOUND"
            if settled.state == "active":
                new = StreamRecord.from_json(settled.to_json())
                new.state, new.pending = "sealed", {"op": "seal"}
                await self.md.put_stream(new)
                await self._finish(new)
        return "SUCCESS"

    async def delete_stream(self, scope: str, stream: str) -> str:
        async with self.lock(f"{scope}/{stream}"):
            rec = self.get(scope, stream)
            if rec is None:
                return "STREAM_NOT_FOUND"
            deleting = rec.pending is not None and rec.pending.get("op") == "delete"
            settled = await self._settle(rec)  # a delete a full disk interrupted ends here
            if settled is None:
                return "SUCCESS" if deleting else "STREAM_NOT_FOUND"
            rec = settled
            if rec.state != "sealed" or rec.pending is not None:
                return "STREAM_NOT_SEALED"
            new = StreamRecord.from_json(rec.to_json())
            new.pending = {"op": "delete"}
            await self.md.put_stream(new)
            log.info("deleting stream %s (%d segment(s))", rec.key, len(rec.segments))
            await self._finish(new)
        log.info("deleted stream %s/%s", scope, stream)
        return "SUCCESS"

    # ------------------------------------------------------------------ scaling

    def check_scale(
        self, rec: StreamRecord, sealed: list[int], ranges: list[tuple[float, float]]
    ) -> bool:
        """Whether replacing ``sealed`` by ``ranges`` keeps the key space tiled."""
        current = set(rec.current.segments)
        if not sealed or not ranges or len(ranges) > MAX_SEGMENTS:
            return False
        if len(set(sealed)) != len(sealed) or not set(sealed) <= current:
            return False
        if any(not 0.0 <= lo < hi <= 1.0 for lo, hi in ranges):
            return False
        kept = [rec.segments[s].key_range for s in current - set(sealed)]
        return covers_key_space(kept + list(ranges))

    async def scale(
        self, scope: str, stream: str, sealed: list[int], ranges: list[tuple[float, float]]
    ) -> tuple[str, StreamRecord | None]:
        """Seal ``sealed`` and replace them by segments over ``ranges`` in a new epoch."""
        async with self.lock(f"{scope}/{stream}"):
            rec = self.get(scope, stream)
            if rec is not None:
                rec = await self._settle(rec)
            if rec is None or rec.state != "active":
                return "PRECONDITION_FAILED", None
            if not self.check_scale(rec, sealed, ranges):
                if self.just_scaled(rec, sealed, ranges):  # a retry (after UNAVAILABLE)
                    return "STARTED", rec
                return "PRECONDITION_FAILED", None
            new = await self.scale_locked(rec, sealed, ranges)
        return "STARTED", new

    @staticmethod
    def just_scaled(
        rec: StreamRecord, sealed: list[int], ranges: list[tuple[float, float]]
    ) -> bool:
        """Whether the stream's latest epoch is exactly this scale: ``sealed`` sealed by it
        and its new segments over ``ranges`` (a client repeating a scale it got no answer to)."""
        epoch = rec.current.epoch
        if epoch == 0 or not sealed or any(s not in rec.segments for s in sealed):
            return False
        made = sorted(rec.segments[s].key_range for s in rec.current.segments if s >> 32 == epoch)
        return made == sorted(ranges) and all(rec.segments[s].sealed_epoch == epoch for s in sealed)

    async def scale_locked(
        self, rec: StreamRecord, sealed: list[int], ranges: list[tuple[float, float]]
    ) -> StreamRecord:
        probe = StreamRecord.from_json(rec.to_json())
        probe.new_epoch(sealed, ranges, now_ms())
        probe.pending = {"op": "seal", "segments": sealed, "ranges": ranges}  # the larger one
        size = len(probe.to_json())
        if size > MAX_RECORD_BYTES:
            raise BadRequest(
                f"stream {rec.key} cannot scale: its record would hold {len(probe.segments)} "
                f"segments ({size} bytes, over {MAX_RECORD_BYTES}); scale by fewer segments"
            )
        log.info("scaling %s: %d segment(s) -> %d", rec.key, len(sealed), len(ranges))
        new = StreamRecord.from_json(rec.to_json())
        new.pending = {"op": "scale", "sealed": sealed, "ranges": ranges, "ms": now_ms()}
        await self.md.put_stream(new)
        return await self._finish(new)

    # ------------------------------------------------------------------ truncation

    async def truncate(self, scope: str, stream: str, cut: dict[int, int]) -> str:
        async with self.lock(f"{scope}/{stream}"):
            rec = self.get(scope, stream)
            if rec is not None:
                rec = await self._settle(rec)
            if rec is None:
                return "STREAM_NOT_FOUND"
            if not rec.valid_cut(cut) or not rec.cut_not_before_head(cut):
                raise BadRequest("not a valid stream cut at or after the stream's head")
            for sid, off in cut.items():
                try:
                    if off > self.store.info(rec.seg_name(sid)).length:
                        raise BadRequest(f"offset {off} is past the end of segment {sid}")
                except SegmentNotFound as e:
                    raise BadRequest(f"segment {sid} no longer exists") from e
            await self.truncate_locked(rec, cut)
        return "SUCCESS"

    async def truncate_locked(self, rec: StreamRecord, cut: dict[int, int]) -> None:
        new = StreamRecord.from_json(rec.to_json())
        new.pending = {"op": "truncate", "cut": list(cut.items())}
        await self.md.put_stream(new)
        await self._finish(new)

    # ------------------------------------------------------------------ finishing steps

    async def recover(self) -> None:
        """Finish every operation a crash interrupted (called once at startup). What the
        store cannot write now (disk still full) stays pending for ``finish_pending``."""
        for rec in list(self.md.streams.values()):
            try:
                await self._recover_one(rec)
            except StorageUnavailable as e:
                log.warning("cannot finish the recovery of %s yet: %s", rec.key, e)

    async def _recover_one(self, rec: StreamRecord) -> None:
        missing = [s for s in rec.current.segments if not self.store.exists(rec.seg_name(s))]
        if rec.pending is None and rec.state == "active" and missing:
            log.info("creating %d missing segment(s) of %s", len(missing), rec.key)
            await self._create_segments(rec, missing, rec.current.created_ms)
        if rec.pending is not None:
            log.info("finishing %s of %s after a restart", rec.pending["op"], rec.key)
            async with self.lock(rec.key):
                await self._finish(rec)

    async def finish_pending(self) -> None:
        """Background duty: finish every operation a failed storage step left pending and
        remove the records of failed creations (``_unmade``); raises StorageUnavailable
        while the store still cannot write (the next tick tries again)."""
        for key in [k for k, r in self.md.streams.items() if r.pending is not None]:
            async with self.lock(key):
                rec = self.md.streams.get(key)
                if rec is not None:
                    await self._settle(rec)
        for key, rec in list(self._unmade.items()):
            async with self.lock(key):
                if self._unmade.get(key) is rec:
                    await self.md.remove_stream(rec)
                    del self._unmade[key]

    async def _settle(self, rec: StreamRecord) -> StreamRecord | None:
        """Under the stream's lock: finish the operation ``rec`` has pending (a store step
        failed after its record was durable); the record after it, None once deleted."""
        if rec.pending is None:
            return rec
        log.info("finishing the pending %s of %s", rec.pending.get("op"), rec.key)
        await self._finish(rec)
        return self.get(rec.scope, rec.stream)

    async def _unmake(self, rec: StreamRecord) -> None:
        """Undo a creation of which a store step failed: its segments, then its record
        (when that was written). A record that cannot be removed now is hidden and
        removed by ``finish_pending``; should the process die first, ``recover`` gives
        it its segments (as after a crash between the two writes)."""
        for sid in rec.epochs[0].segments:
            with contextlib.suppress(StorageError):
                await self._delete(rec.seg_name(sid))
        if rec.key in self.md.streams:
            try:
                await self.md.remove_stream(rec)
            except StorageUnavailable:
                self.md.streams.pop(rec.key, None)
                self._unmade[rec.key] = rec

    async def _finish(self, rec: StreamRecord) -> StreamRecord:
        op = rec.pending or {}
        kind = op.get("op")
        if kind == "scale":
            sealed = [int(s) for s in op["sealed"]]
            ranges = [(float(lo), float(hi)) for lo, hi in op["ranges"]]
            # On a copy: the epoch is added once, by the record that says "seal" next.
            nxt = StreamRecord.from_json(rec.to_json())
            epoch = nxt.new_epoch(sealed, ranges, int(op["ms"]))
            created = [s for s in epoch.segments if s >> 32 == epoch.epoch]
            await self._create_segments(nxt, created, int(op["ms"]))
            # Successors are known (and exist) before any writer can see a sealed segment.
            nxt.pending = {"op": "seal", "segments": sealed}
            await self.md.put_stream(nxt)
            return await self._finish(nxt)
        if kind == "seal":
            rec = StreamRecord.from_json(rec.to_json())  # md keeps the pending one till put
            targets = op.get("segments")
            ids = [int(s) for s in targets] if targets is not None else rec.current.segments
            # Concurrently: the store's group commit makes them share fsyncs.
            lengths = await asyncio.gather(*(self._seal(rec.seg_name(sid)) for sid in ids))
            for sid, length in zip(ids, lengths, strict=True):
                rec.segments[sid].final_length = length
            if targets is not None:
                self.scale_events += 1
                if self.on_scale is not None:
                    number = rec.current.epoch
                    made = sum(1 for s in rec.current.segments if s >> 32 == number)
                    self.on_scale(ScaleEvent(rec.scope, rec.stream, number, made, len(ids)))
        elif kind == "truncate":
            rec = StreamRecord.from_json(rec.to_json())  # md keeps the pending one till put
            cut = {int(s): int(o) for s, o in op["cut"]}
            for sid, off in cut.items():
                await self._truncate(rec.seg_name(sid), off)
            for sid in list(rec.segments):
                if rec.before_cut(sid, cut):
                    await self._delete(rec.seg_name(sid))
            rec.head = cut
            # Cuts at or after the new head stay (retention may truncate there later).
            rec.cuts = [c for c in rec.cuts if rec.cut_not_before_head(c.cut)]
        elif kind == "delete":
            prefix = f"{rec.scope}/{rec.stream}/"
            txn_segments = [
                n
                for n in self.store.segment_names()
                if n.startswith(prefix) and "#transaction." in n
            ]
            for name in [rec.seg_name(sid) for sid in rec.segments] + txn_segments:
                await self._delete(name)
            await self.md.remove_stream(rec)
            self._locks.pop(rec.key, None)
            return rec
        rec.pending = None
        await self.md.put_stream(rec)
        return rec

    async def _create_segments(self, rec: StreamRecord, ids: list[int], t: int) -> None:
        async def create(sid: int) -> None:
            with contextlib.suppress(SegmentExists):
                await self.store.create_segment(rec.seg_name(sid), attributes={CREATION_TIME: t})

        await asyncio.gather(*(create(sid) for sid in ids))

    async def _seal(self, name: str) -> int:
        try:
            return await self.store.seal(name)
        except SegmentSealed:  # sealed before a crash: done
            return self.store.info(name).length
        except SegmentNotFound:
            return 0

    async def _truncate(self, name: str, offset: int) -> None:
        try:
            if self.store.info(name).start_offset < offset:
                await self.store.truncate(name, offset)
        except SegmentNotFound:
            pass

    async def _delete(self, name: str) -> None:
        with contextlib.suppress(SegmentNotFound):
            await self.store.delete(name)

    # ------------------------------------------------------------------ queries

    def start_offset(self, rec: StreamRecord, sid: int) -> int:
        try:
            return self.store.info(rec.seg_name(sid)).start_offset
        except StorageError:
            return 0

    def segments_at(self, rec: StreamRecord, time_ms: int) -> dict[int, int]:
        """The stream cut at ``time_ms`` (0 = the head), with each segment's start offset."""
        head = rec.head_cut()
        if time_ms > 0:
            epoch = rec.epoch_at(time_ms)
            cut = dict.fromkeys(epoch.segments, 0)
            if all(not rec.before_cut(s, head) for s in cut) and rec.cut_not_before_head(cut):
                head = cut
        return {s: max(off, self.start_offset(rec, s)) for s, off in head.items()}

    def segments_between(
        self, rec: StreamRecord, start: dict[int, int], end: dict[int, int]
    ) -> list[int]:
        """Every segment from cut ``start`` (empty = head) to ``end`` (empty = the tail)."""
        frontier = list(start or rec.head_cut())
        seen: set[int] = set()
        while frontier:  # bounded: each segment is visited once
            sid = frontier.pop()
            if sid in seen or (end and rec.after_cut(sid, end)):
                continue
            seen.add(sid)
            if sid not in end:
                frontier.extend(rec.successors(sid))
        return sorted(seen)
