"""Storage failures -> the wire reply the reference prescribes (section 12.1).

``error_reply`` answers one failed request. It returns None when the reference says the
connection must close instead of replying ("anything else").
"""

from __future__ import annotations

import logging

from segmentstore_client.protocol import (
    Command,
    ErrorMessage,
    MergeSegments,
    MergeSegmentsBatch,
    NoSuchSegment,
    ReadSegment,
    RemoveTableKeys,
    Reply,
    SegmentAlreadyExists,
    SegmentAttributeUpdated,
    SegmentIsSealed,
    SegmentIsTruncated,
    TruncateSegment,
    UpdateTableEntries,
)

from ..storage import (
    AppendTooLarge,
    BadAttributeUpdate,
    InvalidOffset,
    SegmentExists,
    SegmentNotFound,
    SegmentSealed,
    SegmentTruncated,
    StorageError,
    StorageUnavailable,
)

log = logging.getLogger("segmentstore.server")

ILLEGAL_ARGUMENT = 0
UNSPECIFIED = -1


def request_segment(command: Command) -> str:
    """The segment an error reply names: the source of a merge, else the request's segment."""
    if isinstance(command, MergeSegments):
        return command.source
    if isinstance(command, MergeSegmentsBatch):
        return command.target_segment_id
    for attr in ("segment", "segment_name", "parent_segment"):
        value = getattr(command, attr, None)
        if isinstance(value, str):
            return value
    return ""


def request_offset(command: Command) -> int:
    """The offset an error reply echoes (read offset, truncation offset, table offset)."""
    if isinstance(command, ReadSegment):
        return command.offset
    if isinstance(command, TruncateSegment):
        return command.truncation_offset
    if isinstance(command, UpdateTableEntries | RemoveTableKeys):
        return command.table_segment_offset
    return -1


def error_reply(command: Command, exc: BaseException, start_offset: int = 0) -> Reply | None:
    rid: int = getattr(command, "request_id", -1)
    segment = request_segment(command)
    offset = request_offset(command)
    if isinstance(exc, SegmentNotFound):
        return NoSuchSegment(rid, segment, "", offset)
    if isinstance(exc, SegmentExists):
        return SegmentAlreadyExists(rid, segment, "")
    if isinstance(exc, SegmentSealed):
        return SegmentIsSealed(rid, segment, "", offset)
    if isinstance(exc, SegmentTruncated):
        return SegmentIsTruncated(rid, segment, exc.start_offset, "", offset)
    if isinstance(exc, InvalidOffset) and isinstance(command, TruncateSegment):
        return SegmentIsTruncated(rid, segment, start_offset, "", offset)
    if isinstance(exc, BadAttributeUpdate):
        return SegmentAttributeUpdated(rid, False)
    if isinstance(exc, InvalidOffset | AppendTooLarge):
        return ErrorMessage(rid, segment, str(exc), ILLEGAL_ARGUMENT)
    if isinstance(exc, StorageUnavailable):
        log.error("storage unavailable serving %s: %s", type(command).__name__, exc)
        return ErrorMessage(rid, segment, f"storage unavailable: {exc}", UNSPECIFIED)
    if isinstance(exc, StorageError):
        log.error("storage error serving %s: %s", type(command).__name__, exc)
        return ErrorMessage(rid, segment, str(exc), UNSPECIFIED)
    return None
