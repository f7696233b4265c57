"""Wire commands of one family: segment management and segment attributes (reference 6.4-6.5).

Declared with ``@wire`` (commands_base.py); import them from ``segmentstore_client.protocol``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from .commands_base import Command, Reply, _omitted, wire
from .structures import (
    ConditionalAttributeUpdate,
)

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
