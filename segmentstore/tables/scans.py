# Scans of a table segment's bytes: exact reads, rebuilding an index, delta reads (10.4).
#
# Contract. Every function reads committed bytes through ``SegmentStore.read`` and changes
# nothing but the TableState it builds. ``read_exact`` returns exactly the bytes asked for
# or raises (SegmentTruncated when a compaction truncated them away meanwhile: callers
# retry). ``load_table`` folds every record from the segment's start offset into a new
# index and reports why the table must be read-only (a corrupt or torn record), if it must;
# what it indexed up to there is served. ``read_delta`` returns the newest update of each key
# recorded at or after a record boundary, at most ``limit`` keys and MAX_REPLY_BYTES.
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final

from ..storage import (
    SEGMENT_TYPE_FIXED_KEY_TABLE,
    SegmentInfo,
    SegmentStore,
    StorageUnavailable,
    core_attribute,
)
from .errors import IllegalTableArgument
from .index import TableState
from .paging import MAX_REPLY_BYTES, wire_key_size, wire_value_size
from .records import UPDATE, CorruptRecord, fold_records, parse_record

log = logging.getLogger("segmentstore.tables")

MAX_FIXED_KEY_LENGTH: Final = 256
KEY_LENGTH_ATTRIBUTE: Final = core_attribute(12)
# Bytes read from a table segment at a time by scans (recovery, delta reads).
READ_WINDOW: Final = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class DeltaRead:
    entries: list[tuple[bytes, bytes, int]]  # (key, value, version)
    should_clear: bool
    reached_end: bool
    last_position: int


async def read_exact(store: SegmentStore, name: str, offset: int, length: int) -> bytes:
    """Exactly ``length`` committed bytes of ``name`` from ``offset``."""
    parts: list[bytes | memoryview] = []
    got = 0
    while got < length:  # each round returns >= 1 byte or raises
        r = await store.read(name, offset + got, length - got)
        n = len(r.data)
        if n == 0:
            raise StorageUnavailable(name, f"no data at offset {offset + got}")
        parts.append(r.data)
        got += n
    if len(parts) == 1 and type(parts[0]) is bytes:
        return parts[0]
    return b"".join(parts)


async def load_table(
    store: SegmentStore, info: SegmentInfo, inline: int
) -> tuple[TableState, str | None]:
    """A table's index rebuilt from its segment's records, and why it is read-only (None:
    it is not)."""
    name = info.name
    key_length = 0
    if info.segment_type & SEGMENT_TYPE_FIXED_KEY_TABLE == SEGMENT_TYPE_FIXED_KEY_TABLE:
        key_length = info.attributes.get(KEY_LENGTH_ATTRIBUTE, 0)
        if not 0 < key_length <= MAX_FIXED_KEY_LENGTH:
            log.error(
                "table %s: bad fixed key length %d; serving it as a hash table", name, key_length
            )
            key_length = 0
    t = TableState(name, key_length, inline)
    broken: str | None = None
    pos = info.start_offset
    end = info.length
    while pos < end:  # each round consumes >= 1 record or stops
        data = await read_exact(store, name, pos, min(READ_WINDOW, end - pos))
        try:
            used = fold_records(data, pos, t.index, inline)
        except CorruptRecord as e:
            broken = str(e)
            log.error("table %s: %s; indexed up to there, the table is read-only", name, e)
            pos = e.offset
            break
        if used == 0:
            broken = f"torn record at {pos}"
            log.error("table %s: torn record at %d; the table is read-only", name, pos)
            break
        pos += used
    t.length = t.p_length = pos
    t.start_offset = info.start_offset
    t.count_live_bytes()
    return t, broken


async def read_delta(store: SegmentStore, name: str, from_position: int, limit: int) -> DeltaRead:
    """Changes recorded at or after ``from_position``, newest update per key; a removal
    drops the key from the result (Java's behaviour)."""
    seg = store.info(name)
    length = seg.length
    if not 0 <= from_position <= length:
        raise IllegalTableArgument(
            name, f"fromPosition {from_position} outside 0..{length} (the segment length)"
        )
    should_clear = from_position < seg.start_offset
    pos = max(from_position, seg.start_offset)
    result: dict[bytes, tuple[bytes, int]] = {}
    size = 0
    last = -1
    full = False
    while pos < length and not full:  # each round consumes >= 1 record or stops
        data = memoryview(await read_exact(store, name, pos, min(READ_WINDOW, length - pos)))
        p = 0
        while p < len(data):  # each round consumes one record or stops
            if len(result) >= limit or size >= MAX_REPLY_BYTES:
                full = True
                break
            try:
                rec = parse_record(data, p, pos)
            except CorruptRecord as e:
                raise IllegalTableArgument(name, str(e)) from None
            if rec is None:
                break
            key = rec.key
            old = result.get(key)
            if old is not None:
                size -= wire_key_size(key) + wire_value_size(len(old[0]))
            if rec.kind == UPDATE:
                # An updated key keeps its place in the reply (Java's LinkedHashMap).
                value = bytes(data[rec.value_start : rec.value_start + rec.value_len])
                result[key] = (value, pos + p)
                size += wire_key_size(key) + wire_value_size(len(value))
            elif old is not None:
                del result[key]
            p = rec.end
            last = pos + p
        if p == 0 and not full:
            raise IllegalTableArgument(name, f"no whole table record at {pos}")
        pos += p
    if last < 0:
        return DeltaRead([], False, True, 0)
    entries = [(key, value, version) for key, (value, version) in result.items()]
    return DeltaRead(entries, should_clear, last >= length, last)
