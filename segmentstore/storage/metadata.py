# In-memory metadata of one segment: its committed state and its pending (accepted) state.
#
# Contract. Committed fields (``length``, ``start_offset``, ``sealed``, ``deleted``,
# ``created``, ``attrs``) describe what is durable in the log and are all readers ever see.
# Pending fields (``p_*``) include every operation accepted but not yet durable; validation of
# new operations (conditional offsets, duplicates, seal/delete checks, attribute CAS) uses
# them, so calls are ordered at call time. ``inflight`` counts accepted-but-uncommitted
# operations; when it drops to zero the pending overlay ``p_attrs`` is dropped because the
# committed state has caught up. ``reset_pending`` rolls pending state back to committed
# after a failed log write.
#
# Attribute ids are kept as the UUID's 128-bit int (smaller than UUID objects; converted back
# at the API edge). EVENT_COUNT, which every append changes, lives in its own fields instead
# of the dicts: ``ec`` (committed; None = absent) and ``p_ec`` (pending, always current, 0
# when absent), so the append path touches no dict for it. An idle segment holds one of these
# objects, its name and a small attribute dict: no buffers (``cache`` is None once its data is
# flushed and evicted).
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from .api import EVENT_COUNT, NULL_ATTRIBUTE_VALUE

if TYPE_CHECKING:
    from .read_cache import SegmentCache


_EC = EVENT_COUNT.int


class SegmentMeta:
    __slots__ = (
        "attrs",
        "cache",
        "created",
        "damaged",
        "deleted",
        "ec",
        "flushed",
        "id",
        "inflight",
        "last_modified_ms",
        "length",
        "name",
        "p_attrs",
        "p_deleted",
        "p_ec",
        "p_length",
        "p_sealed",
        "p_start",
        "sealed",
        "segment_type",
        "start_offset",
        "waiters",
    )

    def __init__(self, name: str, seg_id: int, segment_type: int, last_modified_ms: int) -> None:
        self.name = name
        self.id = seg_id
        self.segment_type = segment_type
        self.last_modified_ms = last_modified_ms
        self.created = False
        self.length = 0
        self.start_offset = 0
        self.sealed = False
        self.deleted = False
        self.attrs: dict[int, int] | None = None
        self.ec: int | None = None
        self.p_length = 0
        self.p_start = 0
        self.p_sealed = False
        self.p_deleted = False
        self.p_attrs: dict[int, int] | None = None
        self.p_ec = 0
        self.inflight = 0
        # Bytes of this segment written to chunk files (may be ahead of the last checkpoint).
        self.flushed = 0
        self.cache: SegmentCache | None = None
        # Why this segment's data at rest cannot be read (a chunk file missing, short or
        # failing its checksum), or None. Set by recovery or by a failed read.
        self.damaged: str | None = None
        # wait_for_data callers: (offset they wait beyond, future).
        self.waiters: list[tuple[int, asyncio.Future[None]]] | None = None

    def get_attr(self, key: int) -> int:
        """Committed value of attribute ``key`` (a UUID int)."""
        if key == _EC:
            return NULL_ATTRIBUTE_VALUE if self.ec is None else self.ec
        attrs = self.attrs
        if attrs is None:
            return NULL_ATTRIBUTE_VALUE
        return attrs.get(key, NULL_ATTRIBUTE_VALUE)

    def all_attrs(self) -> dict[int, int]:
        """A copy of every committed attribute."""
        out = dict(self.attrs) if self.attrs else {}
        if self.ec is not None:
            out[_EC] = self.ec
        return out

    def load_attrs(self, values: dict[int, int]) -> None:
        """Commit ``values`` (the attributes a segment is created or recovered with)."""
        self.attrs = None
        self.ec = None
        for key, value in values.items():
            self.set_attr(key, value)

    def pending_attr(self, key: int) -> int:
        """Value of ``key`` once everything accepted so far is durable."""
        if key == _EC:
            return self.p_ec if self.p_ec or self.ec is not None else NULL_ATTRIBUTE_VALUE
        p = self.p_attrs
        if p is not None and key in p:
            return p[key]
        return self.get_attr(key)

    def set_pending_attr(self, key: int, value: int) -> None:
        if key == _EC:
            self.p_ec = 0 if value == NULL_ATTRIBUTE_VALUE else value
            return
        p = self.p_attrs
        if p is None:
            self.p_attrs = {key: value}
        else:
            p[key] = value

    def set_attr(self, key: int, value: int) -> None:
        """Commit ``key := value``; the NULL value removes the attribute (Pravega's rule)."""
        if key == _EC:
            self.ec = None if value == NULL_ATTRIBUTE_VALUE else value
            return
        attrs = self.attrs
        if value == NULL_ATTRIBUTE_VALUE:
            if attrs is not None:
                attrs.pop(key, None)
                if not attrs:
                    self.attrs = None
        elif attrs is None:
            self.attrs = {key: value}
        else:
            attrs[key] = value

    def reset_pending(self) -> None:
        self.p_length = self.length
        self.p_start = self.start_offset
        self.p_sealed = self.sealed
        self.p_deleted = self.deleted
        self.p_attrs = None
        self.p_ec = self.ec or 0
        self.inflight = 0

    def op_committed(self) -> None:
        self.inflight -= 1
        if self.inflight <= 0:
            self.inflight = 0
            self.p_attrs = None

    def wake_waiters(self, everyone: bool) -> None:
        """Wake waiters whose offset is now below the committed length (all: sealed/deleted)."""
        waiters = self.waiters
        if waiters is None:
            return
        length = self.length
        keep = []
        for offset, fut in waiters:
            if everyone or offset < length:
                if not fut.done():
                    fut.set_result(None)
            elif not fut.done():
                keep.append((offset, fut))
        self.waiters = keep or None
