"""Relay checkpoints: the spec's JSON, plus one position per source.

Contract: a checkpoint is a JSON object with the Databus fields ``windowScn`` (the SCN of
the last window consumed), ``windowOffset`` (-1: that window was consumed whole; n >= 0:
its first n events were) and ``consumption_mode`` (``ONLINE_CONSUMPTION``,
``BOOTSTRAP_SNAPSHOT``, ``BOOTSTRAP_CATCHUP``; the bootstrap fields ``bootstrap_start_scn``,
``bootstrap_since_scn``, ``bootstrap_target_scn``, ``snapshot_source``, ``catchup_source``
ride along untouched). Each source of this store has its own SCN sequence, so the relay
adds ``partitions``: ``{"<key>": [windowScn, windowOffset], ...}`` with one key per physical
partition: ``<source id>`` for a segment source, ``<source id>:<segment number>`` for each
segment of a stream source (each segment has its own SCN sequence). A segment source not
in that map takes the top-level pair (so a plain Databus checkpoint works for one source);
a stream segment not in it starts at its beginning. A missing checkpoint, ``windowScn`` < 0
or mode ``FLEXIBLE`` means "from the oldest event kept" (the spec's flexible checkpoint).
For stream sources the relay also keeps (``truncation.py`` says how they are used): a
stream key's position has a third element, the segment offset the consumer has read to
(``[windowScn, windowOffset, offset]``), and ``heads``: ``{"<source id>": {"<segment
number>": offset, ...}}`` is the stream's truncation cut when the consumer started (or
last caught up with it). The relay hands the next checkpoint back in
the ``X-Databus-Checkpoint`` header of every ``/stream`` answer; sending it back resumes
with no gap and no duplicate.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

FLEXIBLE = (-1, -1)


class CheckpointError(ValueError):
    """The checkPoint parameter does not parse."""


@dataclass(slots=True)
class Checkpoint:
    window_scn: int = -1
    window_offset: int = -1
    mode: str = "ONLINE_CONSUMPTION"
    partitions: dict[str, tuple[int, int]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    heads: dict[str, dict[int, int]] = field(default_factory=dict)  # stream source id -> cut
    ends: dict[str, int] = field(default_factory=dict)  # stream key -> segment offset read to

    def position(self, key: str) -> tuple[int, int]:
        """(sinceScn, windowOffset) for a partition key; (-1, -1) is flexible."""
        if self.mode == "FLEXIBLE":
            return FLEXIBLE
        if ":" in key:
            return self.partitions.get(key, FLEXIBLE)
        return self.partitions.get(key, (self.window_scn, self.window_offset))

    def advance(self, key: str, scn: int, offset: int, end: int = -1) -> None:
        """``end``: the segment offset read to (kept for stream keys, ``:`` in them)."""
        self.partitions[key] = (scn, offset)
        if ":" in key:
            if end >= 0:
                self.ends[key] = end
            else:
                self.ends.pop(key, None)
        self.window_scn, self.window_offset = scn, offset
        if self.mode == "FLEXIBLE":
            self.mode = "ONLINE_CONSUMPTION"

    def to_json(self) -> str:
        obj: dict[str, Any] = dict(self.extra)
        obj.update(
            windowScn=self.window_scn,
            windowOffset=self.window_offset,
            consumption_mode=self.mode,
        )
        if self.partitions:
            obj["partitions"] = {
                k: [*v, self.ends[k]] if k in self.ends else list(v)
                for k, v in sorted(self.partitions.items(), key=_order)
            }
        if self.heads:
            obj["heads"] = {
                k: {str(n): off for n, off in sorted(cut.items())}
                for k, cut in sorted(self.heads.items(), key=lambda kv: int(kv[0]))
            }
        return json.dumps(obj, separators=(",", ":"))


def _digits(text: str) -> bool:
    return 0 < len(text) <= 20 and text.isascii() and text.isdigit()


def _order(item: tuple[str, tuple[int, int]]) -> tuple[int, ...]:
    return tuple(int(p) for p in item[0].split(":"))


def _position(value: Any, where: str) -> tuple[int, int, int]:
    """(windowScn, windowOffset, segment offset read to or -1)."""
    if (
        not isinstance(value, list)
        or len(value) not in (2, 3)
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        raise CheckpointError(f"{where} must be [windowScn, windowOffset] (or with an offset)")
    end = int(value[2]) if len(value) == 3 else -1
    return int(value[0]), int(value[1]), end


def parse_checkpoint(text: str | None) -> Checkpoint:
    if text is None or not text.strip():
        return Checkpoint()
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise CheckpointError(f"checkPoint is not JSON: {e}") from None
    if not isinstance(obj, dict):
        raise CheckpointError("checkPoint must be a JSON object")
    cp = Checkpoint()
    try:
        cp.window_scn = int(obj.pop("windowScn", -1))
        cp.window_offset = int(obj.pop("windowOffset", -1))
    except (TypeError, ValueError):
        raise CheckpointError("windowScn and windowOffset must be integers") from None
    cp.mode = str(obj.pop("consumption_mode", "ONLINE_CONSUMPTION"))
    parts = obj.pop("partitions", {})
    if not isinstance(parts, dict):
        raise CheckpointError("partitions must be an object")
    for key, value in parts.items():
        src, colon, number = key.partition(":")
        if not _digits(src) or (colon and not _digits(number)):
            raise CheckpointError(
                f"partitions: {key!r} is not <source id> or <source id>:<segment number>"
            )
        norm = f"{int(src)}:{int(number)}" if colon else str(int(src))
        scn, offset, end = _position(value, f"partitions[{key}]")
        cp.partitions[norm] = (scn, offset)
        if colon and end >= 0:
            cp.ends[norm] = end
    cp.heads = _heads(obj.pop("heads", {}))
    cp.extra = obj
    return cp


def _heads(raw: Any) -> dict[str, dict[int, int]]:
    if not isinstance(raw, dict):
        raise CheckpointError("heads must be an object")
    out: dict[str, dict[int, int]] = {}
    for src, cut in raw.items():
        if not _digits(src) or not isinstance(cut, dict):
            raise CheckpointError(f"heads: {src!r} must be a source id with a cut object")
        parsed: dict[int, int] = {}
        for number, offset in cut.items():
            if (
                not _digits(number)
                or not isinstance(offset, int)
                or isinstance(offset, bool)
                or offset < 0
            ):
                raise CheckpointError(f"heads[{src}]: {number!r} must map to an offset >= 0")
            parsed[int(number)] = offset
        out[str(int(src))] = parsed
    return out
