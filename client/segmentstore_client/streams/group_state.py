"""A reader group's shared state and its transitions, with no I/O (time is passed in).

Contract: the state is a JSON-able dict kept in one table entry and changed only by
conditional updates (read, apply one function here, write with the version read), so
concurrent readers never lose each other's changes. Segments are named ``"<stream>/<id>"``.

* ``unassigned``: segments ready to read, with the offset to read from.
* ``assigned``: reader -> its segments and their offsets at its last sync.
* ``future``: successors of a scale waiting for predecessors; a successor becomes ready
  only when no predecessor is still to read (unassigned, assigned or itself waiting), so
  per-key order holds across scaling.
* ``completed``: finished segments; ``heartbeats``: reader -> time of last sync.
* ``checkpoints``: name -> readers still to pass it and the positions reported so far.
* ``generation``: bumped by a reset; a reader that sees it change drops its segments.

Balance: a reader owns at most ``ceil(segments / readers)`` segments; one below its share
takes half of what it lacks per sync (so readers joining meanwhile find segments), one
above releases its extras at its current offsets.
"""

from __future__ import annotations

import math
from typing import Any

State = dict[str, Any]


def new_state(start: dict[str, int]) -> State:
    return {
        "unassigned": dict(start),
        "assigned": {},
        "future": {},
        "completed": [],
        "heartbeats": {},
        "checkpoints": {},
        "generation": 0,
    }


def reset(st: State, start: dict[str, int]) -> None:
    gen = st["generation"] + 1
    readers = st["heartbeats"]
    st.clear()
    st.update(new_state(start))
    st["generation"] = gen
    st["heartbeats"] = readers
    st["assigned"] = {r: {} for r in readers}


def share(st: State) -> int:
    total = len(st["unassigned"]) + sum(len(v) for v in st["assigned"].values())
    return max(1, math.ceil(total / max(1, len(st["heartbeats"]))))


def leave(st: State, reader: str, positions: dict[str, int] | None = None) -> None:
    """The reader goes (offline or dead): its segments return at ``positions`` (default:
    the offsets of its last sync); pending checkpoints stop waiting for it."""
    owned = st["assigned"].pop(reader, {})
    for seg, off in owned.items():
        st["unassigned"][seg] = (positions or {}).get(seg, off)
    st["heartbeats"].pop(reader, None)
    for cp in st["checkpoints"].values():
        if reader in cp["pending"]:
            cp["pending"].remove(reader)
            for seg, off in owned.items():
                cp["cut"].setdefault(seg, (positions or {}).get(seg, off))


def sync(
    st: State, reader: str, now: float, positions: dict[str, int], timeout: float
) -> dict[str, int]:
    """One sync of ``reader``: heartbeat, record offsets, pass checkpoints, release dead
    readers' and surplus segments, take its share. Returns its segments and offsets."""
    expire(st, now, timeout, keep=reader)
    st["heartbeats"][reader] = now
    mine = st["assigned"].setdefault(reader, {})
    for seg in mine:
        if seg in positions:
            mine[seg] = positions[seg]
    for cp in st["checkpoints"].values():
        if reader in cp["pending"]:
            cp["pending"].remove(reader)
            for seg, off in mine.items():
                cp["cut"].setdefault(seg, off)
    fair = share(st)
    while len(mine) > fair:
        seg = max(mine)
        st["unassigned"][seg] = mine.pop(seg)
    take = max(1, (fair - len(mine) + 1) // 2)  # half the gap per sync: joiners find some
    for seg in sorted(st["unassigned"])[: min(take, max(0, fair - len(mine)))]:
        mine[seg] = st["unassigned"].pop(seg)
    return dict(mine)


def expire(st: State, now: float, timeout: float, keep: str = "") -> list[str]:
    """Readers (but ``keep``) not synced for ``timeout`` seconds leave (``leave``: their
    segments return at their last synced offsets, checkpoints stop waiting for them)."""
    dead = [r for r, seen in st["heartbeats"].items() if r != keep and now - seen > timeout]
    for reader in dead:
        leave(st, reader)
    return dead


def join(st: State, reader: str, now: float) -> None:
    st["heartbeats"][reader] = now
    st["assigned"].setdefault(reader, {})


def finish(st: State, reader: str, seg: str, successors: dict[str, list[str]]) -> None:
    """``reader`` read ``seg`` to its sealed end; successors whose predecessors are all
    finished become ready at offset 0."""
    st["assigned"].get(reader, {}).pop(seg, None)
    if seg not in st["completed"]:
        st["completed"].append(seg)
    held = set(st["unassigned"])
    for owned in st["assigned"].values():
        held.update(owned)
    live = held | set(st["future"])
    for succ, preds in successors.items():
        if succ in held or succ in st["completed"]:
            continue
        # A predecessor no reader holds or waits for is finished (or before the start).
        waiting = [p for p in preds if p in live]
        if waiting:
            st["future"][succ] = waiting
        else:
            st["future"].pop(succ, None)
            st["unassigned"][succ] = 0


def start_checkpoint(st: State, name: str) -> None:
    if name in st["checkpoints"]:
        raise ValueError(f"checkpoint {name!r} exists already")
    st["checkpoints"][name] = {
        "pending": sorted(st["heartbeats"]),
        "cut": dict(st["unassigned"]),
    }


def checkpoint_cut(st: State, name: str) -> dict[str, int] | None:
    """The checkpoint's positions once every reader passed it (None while pending)."""
    cp = st["checkpoints"].get(name)
    if cp is None:
        raise KeyError(name)
    return None if cp["pending"] else dict(cp["cut"])
