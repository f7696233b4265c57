"""Retention: truncate streams by size or by time, in the background, at stream cuts.

Contract: every ``interval_s`` the task records, for each stream with a retention policy, a
stream cut at the tail of its current segments together with the bytes the stream had
taken in up to that cut (``RetentionCut``, kept durably in the stream record). Then it
truncates the stream at the newest recorded cut that the policy allows to drop:

* SIZE (``retentionParam`` bytes): the newest cut with at least that many bytes after it,
  so the stream keeps at least ``retentionParam`` bytes (as Pravega keeps "at least").
* TIME (``retentionParam`` ms): the newest cut taken at least that long ago.

``retentionMax`` (0 or 2^63-1 = none) bounds what is kept from above. Truncation can only
happen at a recorded cut (a cut at the segments' tails falls between events), so the task
records cuts often enough that the newest cut keeping at least ``retentionParam`` keeps at
most ``retentionMax``: besides every ``interval_s``, also whenever half of the slack
``retentionMax - retentionParam`` has been written (SIZE) or has passed (TIME) since the
last cut. The granularity is one controller tick: a stream taking in more than the slack
within one tick keeps up to one tick's data more than the maximum. Truncation goes through
``Streams.truncate_locked`` (durable, finished after a crash).
"""

from __future__ import annotations

import contextlib
import logging

from ..storage import StorageError
from .model import RetentionCut, StreamConfig, StreamRecord
from .streams import Streams, now_ms

log = logging.getLogger("segmentstore.controller")

MAX_CUTS = 1000  # per stream; the oldest go first


NO_MAX = (1 << 63) - 1  # the official clients send Long.MAX_VALUE for "no maximum"


def has_max(cfg: StreamConfig) -> bool:
    return cfg.retention_type != 0 and 0 < cfg.retention_max < NO_MAX


def cut_due(rec: StreamRecord, now: int, total: int, interval_ms: int) -> bool:
    """Whether the retention task should record a new cut of ``rec`` now."""
    if not rec.cuts:
        return True
    last = rec.cuts[-1]
    if now - last.time_ms >= interval_ms:
        return True
    cfg = rec.config
    if not has_max(cfg):
        return False
    step = max(0, cfg.retention_max - cfg.retention_param) // 2
    if cfg.retention_type == 2:
        return total - last.total_bytes > step
    return now - last.time_ms >= step


def choose_cut(rec: StreamRecord, now: int, total: int) -> RetentionCut | None:
    """The newest recorded cut the stream's policy lets the stream be truncated at."""
    cfg = rec.config
    if cfg.retention_type == 2:
        ok = [c for c in rec.cuts if total - c.total_bytes >= cfg.retention_param]
    elif cfg.retention_type == 1:
        ok = [c for c in rec.cuts if c.time_ms <= now - cfg.retention_param]
    else:
        return None
    return ok[-1] if ok else None


class Retention:
    def __init__(self, streams: Streams, interval_s: float) -> None:
        self.streams = streams
        self.interval_ms = int(interval_s * 1000)
        self.truncations = 0

    def stream_bytes(self, rec: StreamRecord) -> int:
        """Bytes the stream has taken in, over every segment it ever had."""
        total = 0
        for seg in rec.segments.values():
            if seg.sealed_epoch >= 0 and seg.final_length >= 0:
                total += seg.final_length
            else:
                with contextlib.suppress(StorageError):
                    total += self.streams.store.info(rec.seg_name(seg.id)).length
        return total

    async def run(self) -> None:
        now = now_ms()
        for key, rec in list(self.streams.md.streams.items()):
            if not rec.config.retention_type or rec.state != "active":
                continue
            async with self.streams.lock(key):
                rec2 = self.streams.md.streams.get(key)
                if rec2 is None or rec2.pending is not None or rec2.state != "active":
                    continue
                await self._one(rec2, now)

    async def _one(self, rec: StreamRecord, now: int) -> None:
        total = self.stream_bytes(rec)
        if cut_due(rec, now, total, self.interval_ms):
            cut = {}
            for sid in rec.current.segments:
                try:
                    cut[sid] = self.streams.store.info(rec.seg_name(sid)).length
                except StorageError:
                    return
            new = StreamRecord.from_json(rec.to_json())
            new.cuts = [*new.cuts, RetentionCut(now, total, cut)][-MAX_CUTS:]
            await self.streams.md.put_stream(new)
            rec = new
        chosen = choose_cut(rec, now, total)
        if chosen is None or chosen.cut == rec.head_cut():
            return
        if not rec.cut_not_before_head(chosen.cut):
            return
        log.info("retention: truncating %s at %s", rec.key, chosen.cut)
        await self.streams.truncate_locked(rec, chosen.cut)
        self.truncations += 1
