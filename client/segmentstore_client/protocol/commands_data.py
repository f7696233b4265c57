"""Wire commands of one family: handshake, keep-alive, the append path and the read path (reference 6.1-6.3).

Declared with ``@wire`` (commands_base.py); import them from ``segmentstore_client.protocol``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from .commands_base import Command, ErrorReply, Reply, _omitted, wire
from .primitives import Buffer

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
