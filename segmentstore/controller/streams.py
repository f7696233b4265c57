"""Scopes and streams: their lifecycle, scaling, truncation and the segment queries.

Contract: every mutation runs under its stream's lock and follows the same shape: first a
durable metadata record naming the operation (``pending``), then the segment-store calls
(each idempotent: creating an existing segment, sealing a sealed one and deleting a gone
one all count as done), then the record without ``pending``. ``recover()`` at startup
redoes every pending step, so a crash in the middle of a scale, seal, truncation or delete
finishes it. ``createStream`` writes its record and creates its segments at once (one
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
            # Segments and record together (one group commit); should the record outlive
            # its segments in a crash, ``recover`` creates the missing ones.
            await asyncio.gather(
                self._create_segments(rec, rec.epochs[0].segments, t), self.md.put_stream(rec)
            )
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
            if rec.state != "active":
                return "STREAM_SEALED"
            if rec.pending is not None:  # a scale, seal or truncation is finishing
                return "FAILURE"
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
            if rec.state == "active":
                new = StreamRecord.from_json(rec.to_json())
                new.state, new.pending = "sealed", {"op": "seal"}
                await self.md.put_stream(new)
                await self._finish(new)
        return "SUCCESS"

    async def delete_stream(self, scope: str, stream: str) -> str:
        async with self.lock(f"{scope}/{stream}"):
            rec = self.get(scope, stream)
            if rec is None:
                return "STREAM_NOT_FOUND"
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
            if rec is None or rec.state != "active" or rec.pending is not None:
                return "PRECONDITION_FAILED", None
            if not self.check_scale(rec, sealed, ranges):
                return "PRECONDITION_FAILED", None
            new = await self.scale_locked(rec, sealed, ranges)
        return "STARTED", new

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
        """Finish every operation a crash interrupted (called once at startup)."""
        for rec in list(self.md.streams.values()):
            missing = [s for s in rec.current.segments if not self.store.exists(rec.seg_name(s))]
            if rec.pending is None and rec.state == "active" and missing:
                log.info("creating %d missing segment(s) of %s", len(missing), rec.key)
                await self._create_segments(rec, missing, rec.current.created_ms)
            if rec.pending is not None:
                log.info("finishing %s of %s after a restart", rec.pending["op"], rec.key)
                async with self.lock(rec.key):
                    await self._finish(rec)

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
