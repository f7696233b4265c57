"""Auto-scaling of by-rate streams from each segment's measured rate.

Contract: each ``run()`` samples every active segment of every stream whose policy is
BY_RATE_IN_EVENTS_PER_SEC or BY_RATE_IN_KBYTES_PER_SEC: its event count (the store's
EVENT_COUNT attribute) and its length. The rate is a decaying average (exponential, time
constant ``window_s``; Pravega uses a few minutes) of the rate between samples. Then, per
stream and at most one change per run:

* a segment older than ``cooldown_s`` whose rate exceeds ``targetRate`` is split into
  ``scaleFactor`` equal key ranges;
* otherwise two neighbouring segments, both older than ``cooldown_s`` and both below half
  of ``targetRate``, are merged into one, never below ``minNumSegments`` segments.

``decide`` is the pure rule (tested without a server); ``run`` feeds it the samples and
hands its choice to ``Streams.scale``.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from dataclasses import dataclass

from ..storage import EVENT_COUNT, StorageError
from .model import StreamRecord, even_ranges
from .streams import BadRequest, Streams, now_ms

log = logging.getLogger("segmentstore.controller")


@dataclass(slots=True)
class Rate:
    t: float
    length: int
    events: int
    value: float = 0.0


def decide(
    rec: StreamRecord, rates: dict[int, float], now: int, cooldown_ms: int
) -> tuple[list[int], list[tuple[float, float]]] | None:
    """The scale to make (segments to seal, new ranges) or None."""
    cfg = rec.config
    if cfg.scale_type not in (1, 2) or cfg.target_rate <= 0:
        return None
    segs = rec.active_segments()
    ripe = {s.id for s in segs if now - s.created_ms >= cooldown_ms}
    for seg in segs:
        if seg.id in ripe and rates.get(seg.id, 0.0) > cfg.target_rate:
            parts = max(2, cfg.scale_factor)
            return [seg.id], even_ranges(parts, seg.lo, seg.hi)
    if len(segs) <= cfg.min_segments:
        return None
    cold = cfg.target_rate / 2
    for a, b in itertools.pairwise(segs):
        if {a.id, b.id} <= ripe and rates.get(a.id, 0.0) < cold and rates.get(b.id, 0.0) < cold:
            return [a.id, b.id], [(a.lo, b.hi)]
    return None


class AutoScaler:
    def __init__(self, streams: Streams, window_s: float, cooldown_s: float) -> None:
        self.streams = streams
        self.window_s = window_s
        self.cooldown_ms = int(cooldown_s * 1000)
        self.rates: dict[tuple[str, int], Rate] = {}

    def sample(self, rec: StreamRecord) -> dict[int, float]:
        now = time.monotonic()
        out: dict[int, float] = {}
        store = self.streams.store
        for seg in rec.active_segments():
            name = rec.seg_name(seg.id)
            try:
                length = store.info(name).length
                events = max(0, store.get_attribute(name, EVENT_COUNT))
            except StorageError:
                continue
            key = (rec.key, seg.id)
            prev = self.rates.get(key)
            if prev is None:
                self.rates[key] = Rate(now, length, events)
                out[seg.id] = 0.0
                continue
            dt = now - prev.t
            if dt > 0:
                if rec.config.scale_type == 1:
                    inst = (length - prev.length) / 1024 / dt
                else:
                    inst = (events - prev.events) / dt
                alpha = 1 - math.exp(-dt / self.window_s)
                prev.value += alpha * (inst - prev.value)
                prev.t, prev.length, prev.events = now, length, events
            out[seg.id] = prev.value
        return out

    async def run(self) -> None:
        live: set[tuple[str, int]] = set()
        for rec in list(self.streams.md.streams.values()):
            if rec.config.scale_type not in (1, 2) or rec.state != "active" or rec.pending:
                continue
            rates = self.sample(rec)
            live.update((rec.key, s) for s in rec.current.segments)
            choice = decide(rec, rates, now_ms(), self.cooldown_ms)
            if choice is None:
                continue
            sealed, ranges = choice
            log.info(
                "auto-scale %s: %s -> %d segment(s) (rates %s)",
                rec.key, sealed, len(ranges), {s: round(r, 1) for s, r in rates.items()},
            )  # fmt: skip
            try:
                await self.streams.scale(rec.scope, rec.stream, sealed, ranges)
            except BadRequest as e:  # the stream's record is full: one line, no traceback
                log.warning("auto-scale %s refused: %s", rec.key, e)
        for key in [k for k in self.rates if k not in live]:
            del self.rates[key]
