"""The controller's data model, with no I/O: scopes, streams, epochs, segments, transactions.

Contract:

* A stream's segments cover the routing-key space [0, 1). Segment ids are Pravega's:
  ``epoch << 32 | number``, where ``number`` counts every segment the stream ever had and
  ``epoch`` is the epoch that created the segment. Qualified segment names are
  ``scope/stream/<number>.#epoch.<epoch>``; a transaction segment appends
  ``#transaction.<32 hex digits>`` (the two halves of the id in two's complement).
* Epoch ``e`` lists the segments active in it. A segment sealed by a scale is in the epochs
  from its creation up to (excluding) the one that replaced it. Its successors are the
  segments created by that epoch whose key ranges overlap its own.
* Records serialize to JSON (``to_json``/``from_json``) for the metadata table; a record
  with a ``pending`` operation is half done and the controller finishes it at startup.
* Names are validated as Pravega validates user scope and stream names:
  ``[A-Za-z0-9.-]+`` (so never a ``/``), at most ``MAX_NAME_LENGTH`` characters.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

MAX_NAME_LENGTH = 255
_NAME = re.compile(r"[A-Za-z0-9.\-]+")
# The largest key a range may end at: Pravega's clients accept [1.0, 1.0001) as "the end".
KEY_SPACE_END = 1.0
_EPSILON = 1e-9


def valid_name(name: str) -> bool:
    """A user scope or stream name Pravega would accept."""
    return 0 < len(name) <= MAX_NAME_LENGTH and _NAME.fullmatch(name) is not None


def segment_id(epoch: int, number: int) -> int:
    return (epoch << 32) | number


def epoch_of(seg_id: int) -> int:
    return seg_id >> 32


def number_of(seg_id: int) -> int:
    return seg_id & 0xFFFFFFFF


def segment_name(scope: str, stream: str, seg_id: int) -> str:
    return f"{scope}/{stream}/{number_of(seg_id)}.#epoch.{epoch_of(seg_id)}"


def txn_suffix(high: int, low: int) -> str:
    return f"#transaction.{high & 0xFFFFFFFFFFFFFFFF:016x}{low & 0xFFFFFFFFFFFFFFFF:016x}"


def to_signed64(value: int) -> int:
    value &= 0xFFFFFFFFFFFFFFFF
    return value - (1 << 64) if value >= 1 << 63 else value


def even_ranges(
    count: int, lo: float = 0.0, hi: float = KEY_SPACE_END
) -> list[tuple[float, float]]:
    """``count`` equal key ranges splitting [lo, hi); the last one ends exactly at ``hi``."""
    step = (hi - lo) / count
    return [(lo + i * step, hi if i == count - 1 else lo + (i + 1) * step) for i in range(count)]


def overlaps(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] - _EPSILON and b[0] < a[1] - _EPSILON


def covers_key_space(ranges: list[tuple[float, float]]) -> bool:
    """True when the ranges tile [0, 1) with no gap and no overlap."""
    pos = 0.0
    for lo, hi in sorted(ranges):
        if abs(lo - pos) > _EPSILON or hi <= lo:
            return False
        pos = hi
    return abs(pos - KEY_SPACE_END) <= _EPSILON


@dataclass(slots=True)
class StreamConfig:
    """A stream's policies, as the client sent them (enum values are Pravega's)."""

    scale_type: int = 0  # FIXED_NUM_SEGMENTS 0, BY_RATE_IN_KBYTES_PER_SEC 1, ..._EVENTS_... 2
    target_rate: int = 0
    scale_factor: int = 0
    min_segments: int = 1
    retention_type: int = 0  # none 0, TIME 1 (ms), SIZE 2 (bytes)
    retention_param: int = 0
    retention_max: int = 0
    tags: list[str] | None = None


@dataclass(slots=True)
class SegmentRecord:
    id: int
    lo: float
    hi: float
    created_ms: int
    sealed_epoch: int = -1  # the epoch that replaced it; -1 while active
    final_length: int = -1  # its length when sealed by a scale (retention sums these)

    @property
    def key_range(self) -> tuple[float, float]:
        return (self.lo, self.hi)


@dataclass(slots=True)
class EpochRecord:
    epoch: int
    created_ms: int
    segments: list[int]


@dataclass(slots=True)
class RetentionCut:
    """A stream cut taken by the retention task: when, where, and bytes written up to it."""

    time_ms: int
    total_bytes: int
    cut: dict[int, int]


@dataclass(slots=True)
class StreamRecord:
    scope: str
    stream: str
    config: StreamConfig
    created_ms: int
    state: str = "active"  # "active" or "sealed"
    epochs: list[EpochRecord] = field(default_factory=list)
    segments: dict[int, SegmentRecord] = field(default_factory=dict)
    next_number: int = 0
    head: dict[int, int] | None = None  # the truncation stream cut; None = the first epoch
    cuts: list[RetentionCut] = field(default_factory=list)
    pending: dict[str, Any] | None = None  # a half-done operation to finish at startup

    @property
    def key(self) -> str:
        return f"{self.scope}/{self.stream}"

    @property
    def current(self) -> EpochRecord:
        return self.epochs[-1]

    def seg_name(self, seg_id: int) -> str:
        return segment_name(self.scope, self.stream, seg_id)

    def active_segments(self) -> list[SegmentRecord]:
        return [self.segments[s] for s in self.current.segments]

    def epoch(self, number: int) -> EpochRecord | None:
        return self.epochs[number] if 0 <= number < len(self.epochs) else None

    def head_cut(self) -> dict[int, int]:
        """The stream's first readable position: the truncation cut or epoch 0 at offset 0."""
        if self.head is not None:
            return dict(self.head)
        return dict.fromkeys(self.epochs[0].segments, 0)

    def new_epoch(
        self, sealed: list[int], ranges: list[tuple[float, float]], now_ms: int
    ) -> EpochRecord:
        """Add the epoch that replaces ``sealed`` by segments over ``ranges`` (checked by the
        caller); the new segments are numbered after every segment the stream had."""
        number = len(self.epochs)
        created: list[int] = []
        for lo, hi in ranges:
            sid = segment_id(number, self.next_number)
            self.next_number += 1
            self.segments[sid] = SegmentRecord(sid, lo, hi, now_ms)
            created.append(sid)
        for sid in sealed:
            self.segments[sid].sealed_epoch = number
        kept = [s for s in self.current.segments if s not in sealed]
        rec = EpochRecord(number, now_ms, sorted(kept + created, key=lambda s: self.segments[s].lo))
        self.epochs.append(rec)
        return rec

    def successors(self, seg_id: int) -> dict[int, list[int]]:
        """Segments that replaced ``seg_id``, each with all of its predecessors."""
        seg = self.segments.get(seg_id)
        if seg is None or seg.sealed_epoch < 0:
            return {}
        epoch = self.epochs[seg.sealed_epoch]
        previous = self.epochs[seg.sealed_epoch - 1]
        out: dict[int, list[int]] = {}
        for sid in epoch.segments:
            succ = self.segments[sid]
            if epoch_of(sid) != epoch.epoch or not overlaps(succ.key_range, seg.key_range):
                continue
            out[sid] = [
                p
                for p in previous.segments
                if p not in epoch.segments and overlaps(self.segments[p].key_range, succ.key_range)
            ]
        return out

    def epoch_at(self, time_ms: int) -> EpochRecord:
        chosen = self.epochs[0]
        for e in self.epochs:
            if e.created_ms <= time_ms:
                chosen = e
        return chosen

    def valid_cut(self, cut: dict[int, int]) -> bool:
        """Known segments with non-negative offsets whose ranges tile the key space."""
        if not cut or any(s not in self.segments or off < 0 for s, off in cut.items()):
            return False
        return covers_key_space([self.segments[s].key_range for s in cut])

    def before_cut(self, seg_id: int, cut: dict[int, int]) -> bool:
        """True when every byte of ``seg_id`` lies before ``cut`` (it can be deleted)."""
        seg = self.segments[seg_id]
        if seg_id in cut or seg.sealed_epoch < 0:
            return False
        over = [c for c in cut if overlaps(self.segments[c].key_range, seg.key_range)]
        return bool(over) and all(seg.sealed_epoch <= epoch_of(c) for c in over)

    def after_cut(self, seg_id: int, cut: dict[int, int]) -> bool:
        """True when ``seg_id`` starts after ``cut`` (a successor of a cut segment or later)."""
        seg = self.segments[seg_id]
        over = [c for c in cut if overlaps(self.segments[c].key_range, seg.key_range)]
        return (
            seg_id not in cut and bool(over) and all(epoch_of(seg_id) > epoch_of(c) for c in over)
        )

    def cut_not_before_head(self, cut: dict[int, int]) -> bool:
        head = self.head_cut()
        for sid, off in cut.items():
            if sid in head and off < head[sid]:
                return False
            if self.before_cut(sid, head):
                return False
        return True

    # ------------------------------------------------------------------ JSON

    def to_json(self) -> bytes:
        # Built by hand: ``dataclasses.asdict`` deep-copies every field first, which made
        # this the largest Python cost of a createStream (issue 16's latency target).
        c = self.config
        d = {
            "scope": self.scope,
            "stream": self.stream,
            "config": {
                "scale_type": c.scale_type,
                "target_rate": c.target_rate,
                "scale_factor": c.scale_factor,
                "min_segments": c.min_segments,
                "retention_type": c.retention_type,
                "retention_param": c.retention_param,
                "retention_max": c.retention_max,
                "tags": c.tags,
            },
            "created_ms": self.created_ms,
            "state": self.state,
            "epochs": [
                {"epoch": e.epoch, "created_ms": e.created_ms, "segments": e.segments}
                for e in self.epochs
            ],
            "segments": [
                {
                    "id": s.id,
                    "lo": s.lo,
                    "hi": s.hi,
                    "created_ms": s.created_ms,
                    "sealed_epoch": s.sealed_epoch,
                    "final_length": s.final_length,
                }
                for s in self.segments.values()
            ],
            "next_number": self.next_number,
            "head": None if self.head is None else list(self.head.items()),
            "cuts": [[c.time_ms, c.total_bytes, list(c.cut.items())] for c in self.cuts],
            "pending": self.pending,
        }
        return json.dumps(d, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> StreamRecord:
        d = json.loads(raw)
        return cls(
            scope=d["scope"],
            stream=d["stream"],
            config=StreamConfig(**d["config"]),
            created_ms=d["created_ms"],
            state=d["state"],
            epochs=[EpochRecord(**e) for e in d["epochs"]],
            segments={s["id"]: SegmentRecord(**s) for s in d["segments"]},
            next_number=d["next_number"],
            head=None if d["head"] is None else {int(k): int(v) for k, v in d["head"]},
            cuts=[RetentionCut(t, b, {int(k): int(v) for k, v in c}) for t, b, c in d["cuts"]],
            pending=d["pending"],
        )


# Transaction states: the values of Pravega's TxnState.State.
TXN_OPEN, TXN_COMMITTING, TXN_COMMITTED, TXN_ABORTING, TXN_ABORTED = 1, 2, 3, 4, 5


@dataclass(slots=True)
class TxnRecord:
    scope: str
    stream: str
    high: int
    low: int
    epoch: int
    segments: list[int]  # the parent segment ids (the epoch's segments when it was opened)
    lease_ms: int
    expires_ms: int
    state: int = TXN_OPEN
    order: int = 0  # commit order: the n-th commit of the stream
    finished_ms: int = 0
    roll_epoch: int = -1  # a rolling commit: the epoch of copies of its parents

    @property
    def key(self) -> str:
        return f"{self.scope}/{self.stream}/{self.high & 0xFFFFFFFFFFFFFFFF:016x}{self.low:016x}"

    @property
    def suffix(self) -> str:
        return txn_suffix(self.high, self.low)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> TxnRecord:
        return cls(**json.loads(raw))
