"""Wire commands of one family: table segments (reference 6.6).

Declared with ``@wire`` (commands_base.py); import them from ``segmentstore_client.protocol``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .commands_base import Command, Reply, _omitted, wire
from .primitives import Buffer
from .structures import (
    NULL_TABLE_SEGMENT_OFFSET,
    TableEntry,
    TableIteratorArgs,
    TableKey,
)

# --- 6.6 table segments -----------------------------------------------------------------


@wire(68, "GET_TABLE_SEGMENT_INFO", "request", "i64 str str")
@dataclass(frozen=True, slots=True)
class GetTableSegmentInfo(Command):
    request_id: int
    segment_name: str
    delegation_token: str = ""


@wire(69, "TABLE_SEGMENT_INFO", "reply", "i64 str i64 i64 i64 i32")
@dataclass(frozen=True, slots=True)
class TableSegmentInfo(Reply):
    request_id: int
    segment_name: str
    start_offset: int
    length: int
    entry_count: int
    key_length: int


@wire(70, "CREATE_TABLE_SEGMENT", "request", "i64 str str bool? i32? i64?")
@dataclass(frozen=True, slots=True)
class CreateTableSegment(Command):
    request_id: int
    segment: str
    delegation_token: str = ""
    sorted_deprecated: bool = False
    key_length: int = 0
    rollover_size_bytes: int = 0
    wire_omitted: int = _omitted()


@wire(71, "DELETE_TABLE_SEGMENT", "request", "i64 str bool str")
@dataclass(frozen=True, slots=True)
class DeleteTableSegment(Command):
    request_id: int
    segment: str
    must_be_empty: bool
    delegation_token: str = ""


@wire(74, "UPDATE_TABLE_ENTRIES", "request", "i64 str str entries i64+")
@dataclass(frozen=True, slots=True)
class UpdateTableEntries(Command):
    request_id: int
    segment: str
    delegation_token: str
    table_entries: tuple[TableEntry, ...]
    table_segment_offset: int = NULL_TABLE_SEGMENT_OFFSET
    wire_omitted: int = _omitted()


@wire(75, "TABLE_ENTRIES_UPDATED", "reply", "i64 longs")
@dataclass(frozen=True, slots=True)
class TableEntriesUpdated(Reply):
    request_id: int
    updated_versions: tuple[int, ...]


@wire(76, "REMOVE_TABLE_KEYS", "request", "i64 str str keys i64+")
@dataclass(frozen=True, slots=True)
class RemoveTableKeys(Command):
    request_id: int
    segment: str
    delegation_token: str
    keys: tuple[TableKey, ...]
    table_segment_offset: int = NULL_TABLE_SEGMENT_OFFSET
    wire_omitted: int = _omitted()


@wire(77, "TABLE_KEYS_REMOVED", "reply", "i64 str")
@dataclass(frozen=True, slots=True)
class TableKeysRemoved(Reply):
    request_id: int
    segment: str


@wire(78, "READ_TABLE", "request", "i64 str str keys")
@dataclass(frozen=True, slots=True)
class ReadTable(Command):
    request_id: int
    segment: str
    delegation_token: str
    keys: tuple[TableKey, ...]


@wire(79, "TABLE_READ", "reply", "i64 str entries")
@dataclass(frozen=True, slots=True)
class TableRead(Reply):
    request_id: int
    segment: str
    entries: tuple[TableEntry, ...]


@wire(83, "READ_TABLE_KEYS", "request", "i64 str str i32 itargs")
@dataclass(frozen=True, slots=True)
class ReadTableKeys(Command):
    request_id: int
    segment: str
    delegation_token: str
    suggested_key_count: int
    args: TableIteratorArgs = TableIteratorArgs()  # noqa: RUF009 (frozen, shared safely)


@wire(84, "TABLE_KEYS_READ", "reply", "i64 str keys bytes")
@dataclass(frozen=True, slots=True)
class TableKeysRead(Reply):
    request_id: int
    segment: str
    keys: tuple[TableKey, ...]
    continuation_token: Buffer


@wire(85, "READ_TABLE_ENTRIES", "request", "i64 str str i32 itargs")
@dataclass(frozen=True, slots=True)
class ReadTableEntries(Command):
    request_id: int
    segment: str
    delegation_token: str
    suggested_entry_count: int
    args: TableIteratorArgs = TableIteratorArgs()  # noqa: RUF009 (frozen, shared safely)


@wire(86, "TABLE_ENTRIES_READ", "reply", "i64 str entries bytes")
@dataclass(frozen=True, slots=True)
class TableEntriesRead(Reply):
    request_id: int
    segment: str
    entries: tuple[TableEntry, ...]
    continuation_token: Buffer


@wire(88, "READ_TABLE_ENTRIES_DELTA", "request", "i64 str str i64 i32")
@dataclass(frozen=True, slots=True)
class ReadTableEntriesDelta(Command):
    request_id: int
    segment: str
    delegation_token: str
    from_position: int
    suggested_entry_count: int


@wire(87, "TABLE_ENTRIES_DELTA_READ", "reply", "i64 str entries bool bool i64")
@dataclass(frozen=True, slots=True)
class TableEntriesDeltaRead(Reply):
    request_id: int
    segment: str
    entries: tuple[TableEntry, ...]
    should_clear: bool
    reached_end: bool
    last_position: int
