"""Every Pravega WireCommand as a frozen, slotted dataclass carrying its wire type code.

Field order in each class is the *wire* order of the reference (not Java's constructor
order), and each class's ``@wire`` spec names the kind of every field in that order; the
spec is compiled into the class's encoder and decoder (``_compile.py``). Optional trailing
fields have the reference's default as their dataclass default. Writers always emit
every field.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeVar

from ._compile import Decoder, Encoder, compile_command
from .primitives import Buffer
from .structures import (
    NULL_TABLE_SEGMENT_OFFSET,
    ChunkInfo,
    ConditionalAttributeUpdate,
    TableEntry,
    TableIteratorArgs,
    TableKey,
)

Direction = Literal["request", "reply", "both", "inner"]


class Command:
    """Base of every wire command. ``TYPE`` is the wire type code, ``NAME`` the Java enum name."""

    __slots__ = ()
    TYPE: ClassVar[int]
    NAME: ClassVar[str]
    DIRECTION: ClassVar[Direction]
    SPEC: ClassVar[str]
    _encode: ClassVar[Encoder]
    _decode: ClassVar[Decoder]


class Reply(Command):
    """A server-to-client command answering a request (``request_id`` echoes the request's)."""

    __slots__ = ()
    request_id: int


class ErrorReply(Reply):
    """A reply that reports a failure of the request it answers."""

    __slots__ = ()


def _omitted() -> Any:
    """How many optional trailing fields were absent on the wire.

    Only decoding sets it, so that a decoded frame re-encodes byte for byte (the official
    client omits trailing fields, e.g. in CreateTableSegment). Commands built in code
    leave it 0 and are written with every field. It takes no part in equality.
    """
    return dataclasses.field(default=0, compare=False, repr=False, kw_only=True)


COMMAND_TYPES: dict[int, type[Command]] = {}
DECODERS: dict[int, Decoder] = {}
ENCODERS: dict[type[Command], Encoder] = {}

C = TypeVar("C", bound=type[Command])


def wire(type_code: int, name: str, direction: Direction, spec: str) -> Callable[[C], C]:
    def register(cls: C) -> C:
        fields = dataclasses.fields(cls)  # type: ignore[arg-type]
        names = [f.name for f in fields if f.name != "wire_omitted"]
        defaults = {f.name: f.default for f in fields if f.default is not dataclasses.MISSING}
        tracks = any(f.name == "wire_omitted" for f in fields)
        encode, decode = compile_command(cls, type_code, spec, names, defaults, tracks)
        cls.TYPE, cls.NAME, cls.DIRECTION, cls.SPEC = type_code, name, direction, spec
        cls._encode = staticmethod(encode)  # type: ignore[assignment]
        cls._decode = staticmethod(decode)  # type: ignore[assignment]
        if type_code in COMMAND_TYPES:
            raise TypeError(f"type code {type_code} registered twice")
        COMMAND_TYPES[type_code] = cls
        DECODERS[type_code] = decode
        ENCODERS[cls] = encode
        return cls

    return register


# --- 6.1 handshake and keep-alive -------------------------------------------------------


@wire(-127, "HELLO", "both", "i32 i32")
@dataclass(frozen=True, slots=True)
class Hello(Command):
    high_version: int
    low_version: int


@wire(100, "KEEP_ALIVE", "both", "")
@dataclass(frozen=True, slots=True)
class KeepAlive(Command):
    pass


# --- 6.2 append path --------------------------------------------------------------------


@wire(0, "EVENT", "inner", "tail")
@dataclass(frozen=True, slots=True)
class Event(Command):
    data: Buffer


@wire(-2, "PARTIAL_EVENT", "inner", "tail")
@dataclass(frozen=True, slots=True)
class PartialEvent(Command):
    data: Buffer


@wire(-1, "PADDING", "request", "padding")
@dataclass(frozen=True, slots=True)
class Padding(Command):
    length: int


@wire(1, "SETUP_APPEND", "request", "i64 uuid str str")
@dataclass(frozen=True, slots=True)
class SetupAppend(Command):
    request_id: int
    writer_id: uuid.UUID
    segment: str
    delegation_token: str = ""


@wire(2, "APPEND_SETUP", "reply", "i64 str uuid i64")
@dataclass(frozen=True, slots=True)
class AppendSetup(Reply):
    request_id: int
    segment: str
    writer_id: uuid.UUID
    last_event_number: int


@wire(3, "APPEND_BLOCK", "request", "uuid tail")
@dataclass(frozen=True, slots=True)
class AppendBlock(Command):
    writer_id: uuid.UUID
    data: Buffer


@wire(4, "APPEND_BLOCK_END", "request", "uuid i32 bytes i32 i64 i64?")
@dataclass(frozen=True, slots=True)
class AppendBlockEnd(Command):
    writer_id: uuid.UUID
    size_of_whole_events: int
    data: Buffer
    num_events: int
    last_event_number: int
    request_id: int = -1
    wire_omitted: int = _omitted()


@wire(5, "CONDITIONAL_APPEND", "request", "uuid i64 i64 event i64?")
@dataclass(frozen=True, slots=True)
class ConditionalAppend(Command):
    writer_id: uuid.UUID
    event_number: int
    expected_offset: int
    data: Buffer  # the event payload; on the wire it is an embedded Event record
    request_id: int = -1
    wire_omitted: int = _omitted()


@wire(89, "CONDITIONAL_BLOCK_END", "request", "uuid i64 i64 bytes i64")
@dataclass(frozen=True, slots=True)
class ConditionalBlockEnd(Command):
    writer_id: uuid.UUID
    event_number: int
    expected_offset: int
    data: Buffer
    request_id: int


@wire(7, "DATA_APPENDED", "reply", "uuid i64 i64? i64? i64?")
@dataclass(frozen=True, slots=True)
class DataAppended(Reply):
    writer_id: uuid.UUID
    event_number: int
    previous_event_number: int = -1
    request_id: int = -1
    current_segment_write_offset: int = -1
    wire_omitted: int = _omitted()


@wire(8, "CONDITIONAL_CHECK_FAILED", "reply", "uuid i64 i64?")
@dataclass(frozen=True, slots=True)
class ConditionalCheckFailed(Reply):
    writer_id: uuid.UUID
    event_number: int
    request_id: int = -1
    wire_omitted: int = _omitted()


@wire(55, "INVALID_EVENT_NUMBER", "reply", "uuid i64 str? i64?")
@dataclass(frozen=True, slots=True)
class InvalidEventNumber(ErrorReply):
    writer_id: uuid.UUID
    request_id: int
    server_stack_trace: str = ""
    event_number: int = -1
    wire_omitted: int = _omitted()


# --- 6.3 read path ----------------------------------------------------------------------


@wire(9, "READ_SEGMENT", "request", "str i64 i32 str i64?")
@dataclass(frozen=True, slots=True)
class ReadSegment(Command):
    segment: str
    offset: int
    suggested_length: int
    delegation_token: str = ""
    request_id: int = -1
    wire_omitted: int = _omitted()


@wire(10, "SEGMENT_READ", "reply", "str i64 bool bool bytes i64?")
@dataclass(frozen=True, slots=True)
class SegmentRead(Reply):
    segment: str
    offset: int
    at_tail: bool
    end_of_segment: bool
    data: Buffer
    request_id: int = -1
    wire_omitted: int = _omitted()


# --- 6.4 segment management -------------------------------------------------------------


@wire(11, "GET_STREAM_SEGMENT_INFO", "request", "i64 str str")
@dataclass(frozen=True, slots=True)
class GetStreamSegmentInfo(Command):
    request_id: int
    segment_name: str
    delegation_token: str = ""


@wire(12, "STREAM_SEGMENT_INFO", "reply", "i64 str bool bool bool i64 i64 i64?")
@dataclass(frozen=True, slots=True)
class StreamSegmentInfo(Reply):
    request_id: int
    segment_name: str
    exists: bool
    is_sealed: bool
    is_deleted: bool
    last_modified: int
    write_offset: int
    start_offset: int = 0
    wire_omitted: int = _omitted()


@wire(20, "CREATE_SEGMENT", "request", "i64 str i32 i8 str i64?")
@dataclass(frozen=True, slots=True)
class CreateSegment(Command):
    request_id: int
    segment: str
    target_rate: int = 0
    scale_type: int = 0
    delegation_token: str = ""
    rollover_size_bytes: int = 0
    wire_omitted: int = _omitted()


@wire(21, "SEGMENT_CREATED", "reply", "i64 str")
@dataclass(frozen=True, slots=True)
class SegmentCreated(Reply):
    request_id: int
    segment: str


@wire(40, "CREATE_TRANSIENT_SEGMENT", "request", "i64 uuid str str")
@dataclass(frozen=True, slots=True)
class CreateTransientSegment(Command):
    request_id: int
    writer_id: uuid.UUID
    parent_segment: str
    delegation_token: str = ""


@wire(28, "SEAL_SEGMENT", "request", "i64 str str")
@dataclass(frozen=True, slots=True)
class SealSegment(Command):
    request_id: int
    segment: str
    delegation_token: str = ""


@wire(29, "SEGMENT_SEALED", "reply", "i64 str")
@dataclass(frozen=True, slots=True)
class SegmentSealed(Reply):
    request_id: int
    segment: str


@wire(38, "TRUNCATE_SEGMENT", "request", "i64 str i64 str")
@dataclass(frozen=True, slots=True)
class TruncateSegment(Command):
    request_id: int
    segment: str
    truncation_offset: int
    delegation_token: str = ""


@wire(39, "SEGMENT_TRUNCATED", "reply", "i64 str")
@dataclass(frozen=True, slots=True)
class SegmentTruncated(Reply):
    request_id: int
    segment: str


@wire(30, "DELETE_SEGMENT", "request", "i64 str str")
@dataclass(frozen=True, slots=True)
class DeleteSegment(Command):
    request_id: int
    segment: str
    delegation_token: str = ""


@wire(31, "SEGMENT_DELETED", "reply", "i64 str")
@dataclass(frozen=True, slots=True)
class SegmentDeleted(Reply):
    request_id: int
    segment: str


@wire(32, "UPDATE_SEGMENT_POLICY", "request", "i64 str i32 i8 str")
@dataclass(frozen=True, slots=True)
class UpdateSegmentPolicy(Command):
    request_id: int
    segment: str
    target_rate: int
    scale_type: int
    delegation_token: str = ""


@wire(33, "SEGMENT_POLICY_UPDATED", "reply", "i64 str")
@dataclass(frozen=True, slots=True)
class SegmentPolicyUpdated(Reply):
    request_id: int
    segment: str


@wire(58, "MERGE_SEGMENTS", "request", "i64 str str str caus?")
@dataclass(frozen=True, slots=True)
class MergeSegments(Command):
    request_id: int
    target: str
    source: str
    delegation_token: str = ""
    attribute_updates: tuple[ConditionalAttributeUpdate, ...] = ()
    wire_omitted: int = _omitted()


@wire(59, "SEGMENTS_MERGED", "reply", "i64 str str i64+")
@dataclass(frozen=True, slots=True)
class SegmentsMerged(Reply):
    request_id: int
    target: str
    source: str
    new_target_write_offset: int = -1
    wire_omitted: int = _omitted()


@wire(90, "MERGE_SEGMENTS_BATCH", "request", "i64 str strs str")
@dataclass(frozen=True, slots=True)
class MergeSegmentsBatch(Command):
    request_id: int
    target_segment_id: str
    source_segment_ids: tuple[str, ...]
    delegation_token: str = ""


@wire(91, "SEGMENTS_BATCH_MERGED", "reply", "i64 str pairs")
@dataclass(frozen=True, slots=True)
class SegmentsBatchMerged(Reply):
    request_id: int
    target: str
    merged: tuple[tuple[str, int], ...]  # (source name, target length at or after its merge)


@wire(41, "LOCATE_OFFSET", "request", "i64 str i64 str")
@dataclass(frozen=True, slots=True)
class LocateOffset(Command):
    request_id: int
    segment: str
    target_offset: int
    delegation_token: str = ""


@wire(42, "OFFSET_LOCATED", "reply", "i64 str i64")
@dataclass(frozen=True, slots=True)
class OffsetLocated(Reply):
    request_id: int
    segment: str
    offset: int


# --- 6.5 segment attributes -------------------------------------------------------------


@wire(34, "GET_SEGMENT_ATTRIBUTE", "request", "i64 str uuid str")
@dataclass(frozen=True, slots=True)
class GetSegmentAttribute(Command):
    request_id: int
    segment_name: str
    attribute_id: uuid.UUID
    delegation_token: str = ""


@wire(35, "SEGMENT_ATTRIBUTE", "reply", "i64 i64")
@dataclass(frozen=True, slots=True)
class SegmentAttribute(Reply):
    request_id: int
    value: int


@wire(36, "UPDATE_SEGMENT_ATTRIBUTE", "request", "i64 str uuid i64 i64 str")
@dataclass(frozen=True, slots=True)
class UpdateSegmentAttribute(Command):
    request_id: int
    segment_name: str
    attribute_id: uuid.UUID
    new_value: int
    expected_value: int
    delegation_token: str = ""


@wire(37, "SEGMENT_ATTRIBUTE_UPDATED", "reply", "i64 bool")
@dataclass(frozen=True, slots=True)
class SegmentAttributeUpdated(Reply):
    request_id: int
    success: bool


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


# --- 6.7 error replies ------------------------------------------------------------------


@wire(50, "WRONG_HOST", "reply", "i64 str str str?")
@dataclass(frozen=True, slots=True)
class WrongHost(ErrorReply):
    request_id: int
    segment: str
    correct_host: str = ""
    server_stack_trace: str = ""
    wire_omitted: int = _omitted()


@wire(51, "SEGMENT_IS_SEALED", "reply", "i64 str str? i64?")
@dataclass(frozen=True, slots=True)
class SegmentIsSealed(ErrorReply):
    request_id: int
    segment: str
    server_stack_trace: str = ""
    offset: int = -1
    wire_omitted: int = _omitted()


@wire(52, "SEGMENT_ALREADY_EXISTS", "reply", "i64 str str?")
@dataclass(frozen=True, slots=True)
class SegmentAlreadyExists(ErrorReply):
    request_id: int
    segment: str
    server_stack_trace: str = ""
    wire_omitted: int = _omitted()


@wire(53, "NO_SUCH_SEGMENT", "reply", "i64 str str? i64?")
@dataclass(frozen=True, slots=True)
class NoSuchSegment(ErrorReply):
    request_id: int
    segment: str
    server_stack_trace: str = ""
    offset: int = -1
    wire_omitted: int = _omitted()


@wire(56, "SEGMENT_IS_TRUNCATED", "reply", "i64 str i64 str? i64?")
@dataclass(frozen=True, slots=True)
class SegmentIsTruncated(ErrorReply):
    request_id: int
    segment: str
    start_offset: int
    server_stack_trace: str = ""
    offset: int = -1
    wire_omitted: int = _omitted()


@wire(57, "OPERATION_UNSUPPORTED", "reply", "i64 str str?")
@dataclass(frozen=True, slots=True)
class OperationUnsupported(ErrorReply):
    request_id: int
    operation_name: str
    server_stack_trace: str = ""
    wire_omitted: int = _omitted()


@wire(60, "AUTH_TOKEN_CHECK_FAILED", "reply", "i64 str? i32?")
@dataclass(frozen=True, slots=True)
class AuthTokenCheckFailed(ErrorReply):
    request_id: int
    server_stack_trace: str = ""
    error_code: int = -1
    wire_omitted: int = _omitted()


@wire(61, "ERROR_MESSAGE", "reply", "i64 str str i32")
@dataclass(frozen=True, slots=True)
class ErrorMessage(ErrorReply):
    request_id: int
    segment: str
    message: str
    error_code: int = -1


@wire(80, "TABLE_SEGMENT_NOT_EMPTY", "reply", "i64 str str")
@dataclass(frozen=True, slots=True)
class TableSegmentNotEmpty(ErrorReply):
    request_id: int
    segment: str
    server_stack_trace: str = ""


@wire(81, "TABLE_KEY_DOES_NOT_EXIST", "reply", "i64 str str")
@dataclass(frozen=True, slots=True)
class TableKeyDoesNotExist(ErrorReply):
    request_id: int
    segment: str
    server_stack_trace: str = ""


@wire(82, "TABLE_KEY_BAD_VERSION", "reply", "i64 str str")
@dataclass(frozen=True, slots=True)
class TableKeyBadVersion(ErrorReply):
    request_id: int
    segment: str
    server_stack_trace: str = ""


# --- 6.8 admin gateway ------------------------------------------------------------------


@wire(-3, "FLUSH_TO_STORAGE", "request", "i32 str i64")
@dataclass(frozen=True, slots=True)
class FlushToStorage(Command):
    container_id: int
    delegation_token: str
    request_id: int


@wire(-4, "FLUSHED_TO_STORAGE", "reply", "i64")
@dataclass(frozen=True, slots=True)
class StorageFlushed(Reply):
    request_id: int


@wire(-5, "LIST_STORAGE_CHUNKS", "request", "str str i64")
@dataclass(frozen=True, slots=True)
class ListStorageChunks(Command):
    segment: str
    delegation_token: str
    request_id: int


@wire(-6, "STORAGE_CHUNKS_LISTED", "reply", "i64 chunks")
@dataclass(frozen=True, slots=True)
class StorageChunksListed(Reply):
    request_id: int
    chunks: tuple[ChunkInfo, ...]


def command_for_type(type_code: int) -> type[Command] | None:
    """The command class registered for a wire type code, or None if it is unknown."""
    return COMMAND_TYPES.get(type_code)


def _all_commands() -> dict[str, Any]:
    return {cls.__name__: cls for cls in COMMAND_TYPES.values()}
