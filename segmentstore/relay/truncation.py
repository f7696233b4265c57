"""Stream sources under truncation: when a consumer's checkpoint is "too old".

Contract. A stream's truncation (``truncateStream`` or retention) deletes the segments
before its cut and truncates the cut's segments at their offsets. A stream checkpoint
(``checkpoint.py``) carries, per stream source, the cut in force when the consumer
started (``heads``), and per segment it read from the segment offset it read to. A
request is too old for a stream source when the truncation took data the consumer had
not read:

* a segment the current cut deleted that was not already gone at the consumer's cut and
  that the consumer had not read to its sealed length (the controller's record keeps
  every sealed segment's final length);
* a segment that still exists, that the consumer never read from (no position, or a
  flexible one) and whose data now starts above the consumer's cut offset for it (0 for
  a segment after that cut);
* a segment the consumer read part of, truncated past its position (the partition's own
  rule, ``Partition.start_of``, as for a plain segment).

A checkpoint with no ``heads`` entry for the source (a new consumer, or mode
``FLEXIBLE``) takes the current cut: it starts at the oldest data kept. After every
answer, ``settle`` moves the checkpoint's cut up to the stream's (``check`` having
passed, the consumer is past it) and drops the positions of the deleted segments, so the
checkpoint stays as small as the stream's live segments.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from ..controller.model import number_of
from .catalogue import Source
from .checkpoint import Checkpoint
from .partition import Partition

Keyed = Sequence[tuple[str, Partition]]  # (checkpoint key, partition) of one stream source


def check(source: Source, parts: Keyed, cp: Checkpoint) -> str | None:
    """Why ``cp`` is too old for the stream ``source`` (None: it is not); a checkpoint new
    to the source adopts its current cut here."""
    sid = str(source.id)
    if cp.mode == "FLEXIBLE" or sid not in cp.heads:
        cp.heads[sid] = dict(source.head)
        return None
    mine = cp.heads[sid]
    rec = source.record
    if rec is not None and source.gone:
        ids = {number_of(s): s for s in rec.segments}
        mine_ids = {ids[n]: off for n, off in mine.items() if n in ids}
        for number in source.gone:
            seg = ids[number]
            if mine_ids and rec.before_cut(seg, mine_ids):
                continue  # already gone when the consumer started
            final = rec.segments[seg].final_length
            if 0 <= final <= _read_to(cp, f"{sid}:{number}", mine.get(number, 0)):
                continue  # read to its end
            return (
                f"segment {number} of stream {source.stream!r} was truncated away before "
                "this checkpoint read it to its end"
            )
    for key, part in parts:
        position = cp.partitions.get(key)
        if position is not None and position[0] >= 0:
            continue  # read from: Partition.start_of judges it
        number = int(key.partition(":")[2])
        if part.base > mine.get(number, 0):
            return (
                f"segment {number} of stream {source.stream!r} was truncated at "
                f"{part.base} before this checkpoint read from it"
            )
    return None


def _read_to(cp: Checkpoint, key: str, start: int) -> int:
    """The segment offset the checkpoint has read ``key`` to (-1: not known)."""
    position = cp.partitions.get(key)
    if position is None or position[0] < 0:
        return start  # never read from: nothing below its start was the consumer's
    return cp.ends.get(key, -1) if position[1] < 0 else -1


def end_of(part: Partition, scn: int, window_offset: int) -> int:
    """The segment offset a position has read to: the end of the window at ``scn`` if
    consumed whole, else its start (-1: not in the index)."""
    i = bisect.bisect_left(part.scns, scn)
    if i >= len(part.scns) or part.scns[i] != scn:
        return -1
    return part.window_end(i) if window_offset < 0 else part.starts[i]


def gone_ok(source: Source) -> set[str]:
    """Segment names of the source's deleted segments that a successor need not wait for
    (``check`` passed: each was read to its end or gone before the consumer started)."""
    rec = source.record
    if rec is None:
        return set()
    ids = {number_of(s): s for s in rec.segments}
    return {rec.seg_name(ids[n]) for n in source.gone if n in ids}


def settle(source: Source, cp: Checkpoint) -> None:
    """After serving ``source`` (``check`` passed): catch the checkpoint's cut up with
    the stream's and forget the deleted segments."""
    sid = str(source.id)
    current = dict(source.head)
    if cp.heads.get(sid) == current:
        return
    for number in source.gone:
        key = f"{sid}:{number}"
        cp.partitions.pop(key, None)
        cp.ends.pop(key, None)
    cp.heads[sid] = current
