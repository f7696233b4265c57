"""Wire commands of one family: error replies (reference 6.7).

Declared with ``@wire`` (commands_base.py); import them from ``segmentstore_client.protocol``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .commands_base import ErrorReply, _omitted, wire

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
