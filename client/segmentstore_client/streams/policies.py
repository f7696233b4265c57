"""Stream policies (scaling, retention) and what ``stream_info`` reports.

Contract: plain frozen dataclasses whose enum values are Pravega's (they go straight into
the controller's protobuf messages); constructors validate their arguments. No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .routing import KeyRange
from .stream_cut import StreamCut


@dataclass(frozen=True, slots=True)
class ScalingPolicy:
    """How many segments a stream has: fixed, or scaled by event or byte rate.

    Example::

        ScalingPolicy.fixed(8)
        ScalingPolicy.by_event_rate(target=1000, factor=2, min_segments=2)
    """

    kind: int = 0  # FIXED 0, BY_RATE_IN_KBYTES_PER_SEC 1, BY_RATE_IN_EVENTS_PER_SEC 2
    target_rate: int = 0
    scale_factor: int = 0
    min_segments: int = 1

    def __post_init__(self) -> None:
        if self.min_segments < 1:
            raise ValueError("a stream needs at least one segment")
        if self.kind and (self.target_rate <= 0 or self.scale_factor <= 0):
            raise ValueError("a by-rate policy needs target > 0 and factor > 0")

    @classmethod
    def fixed(cls, segments: int) -> ScalingPolicy:
        return cls(0, 0, 0, segments)

    @classmethod
    def by_kbytes_rate(cls, target: int, factor: int, min_segments: int = 1) -> ScalingPolicy:
        return cls(1, target, factor, min_segments)

    @classmethod
    def by_event_rate(cls, target: int, factor: int, min_segments: int = 1) -> ScalingPolicy:
        return cls(2, target, factor, min_segments)


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """How much of a stream is kept: by time (ms) or by size (bytes).

    Example::

        RetentionPolicy.by_time(7 * 24 * 3600 * 1000)
    """

    kind: int = 0  # none 0, TIME 1, SIZE 2
    limit: int = 0
    max: int = 0

    def __post_init__(self) -> None:
        if self.limit < 0 or self.max < 0:
            raise ValueError("retention limits must not be negative")

    @classmethod
    def by_time(cls, ms: int, max_ms: int = 0) -> RetentionPolicy:
        return cls(1, ms, max_ms)

    @classmethod
    def by_size(cls, size: int, max_size: int = 0) -> RetentionPolicy:
        return cls(2, size, max_size)


@dataclass(frozen=True, slots=True)
class SegmentStats:
    """One segment of a stream: its key range and what it holds."""

    segment: int
    name: str
    range: KeyRange
    start_offset: int
    length: int
    events: int
    sealed: bool


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """What ``client.stream_info("scope/stream")`` reports."""

    stream: str
    sealed: bool
    epochs: list[list[KeyRange]]
    head: StreamCut
    tail: StreamCut
    segments: dict[int, SegmentStats] = field(default_factory=dict)
