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
a stream segment not in it starts at its beginning. A missing checkpoint, ``windowScn`` < 0 or mode ``FLEXIBLE`` means "from the oldest
event kept" (the spec's flexible checkpoint). The relay hands the next checkpoint back in
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

    def position(self, key: str) -> tuple[int, int]:
        """(sinceScn, windowOffset) for a partition key; (-1, -1) is flexible."""
        if self.mode == "FLEXIBLE":
            return FLEXIBLE
        if ":" in key:
            return self.partitions.get(key, FLEXIBLE)
        return self.partitions.get(key, (self.window_scn, self.window_offset))

    def advance(self, key: str, scn: int, offset: int) -> None:
        self.partitions[key] = (scn, offset)
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
            obj["partitions"] = {k: list(v) for k, v in sorted(self.partitions.items(), key=_order)}
        return json.dumps(obj, separators=(",", ":"))


def _digits(text: str) -> bool:
    return 0 < len(text) <= 20 and text.isascii() and text.isdigit()


def _order(item: tuple[str, tuple[int, int]]) -> tuple[int, ...]:
    return tuple(int(p) for p in item[0].split(":"))


def _pair(value: Any, where: str) -> tuple[int, int]:
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        raise CheckpointError(f"{where} must be [windowScn, windowOffset]")
    return int(value[0]), int(value[1])


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
        cp.partitions[norm] = _pair(value, f"partitions[{key}]")
    cp.extra = obj
    return cp
