"""Failures -> the wire reply the reference prescribes (section 12.1).

``error_reply`` answers one failed request. It returns None when the reference says the
connection must close instead of replying ("anything else"). ``internal_error`` is the
catch-all for exceptions that are not storage outcomes (a bug, or input nothing else
checked): ``ErrorMessage`` with code UNSPECIFIED, logged with its traceback once per kind.
``name_refusal`` checks the names a request would create (one rule:
``segmentstore_client.protocol.names``) and answers a bad one the way Pravega's server
answers an illegal argument: ``ErrorMessage(requestId, name, why, 0)``. ``encode_reply``
never fails: a reply that cannot be encoded (a name too long to repeat) becomes an
``ErrorMessage`` with the name shortened, so every request still gets an answer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from segmentstore_client.errors import LocalProtocolError
from segmentstore_client.protocol import (
    Command,
    CreateSegment,
    CreateTableSegment,
    CreateTransientSegment,
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
    encode,
)
from segmentstore_client.protocol.names import name_problem

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


# A name shown in a fallback reply or a log line is cut to this many characters.
SHOWN_NAME_CHARS = 200
_logged_internal: set[tuple[str, str]] = set()


def shown(name: str) -> str:
    return name if len(name) <= SHOWN_NAME_CHARS else name[: SHOWN_NAME_CHARS - 3] + "..."


def internal_error(command: Command, exc: BaseException) -> ErrorMessage:
    """The reply to a request whose handling raised something unexpected."""
    kind = (type(command).__name__, type(exc).__name__)
    if kind in _logged_internal:
        log.error("internal error serving %s: %r", kind[0], exc)
    else:
        _logged_internal.add(kind)
        log.error("internal error serving %s", kind[0], exc_info=exc)
    rid: int = getattr(command, "request_id", -1)
    message = shown(f"internal error: {type(exc).__name__}: {exc}")
    return ErrorMessage(rid, shown(request_segment(command)), message, UNSPECIFIED)


def created_names(command: Command) -> tuple[str, ...]:
    """The names a request would create (checked before it reaches a handler)."""
    if isinstance(command, CreateSegment | CreateTableSegment):
        return (command.segment,)
    if isinstance(command, CreateTransientSegment):
        return (command.parent_segment,)
    return ()


def name_refusal(command: Command) -> ErrorMessage | None:
    """ErrorMessage(ILLEGAL_ARGUMENT) naming the bad name and why, or None if all are good."""
    for name in created_names(command):
        problem = name_problem(name)
        if problem is not None:
            rid: int = getattr(command, "request_id", -1)
            message = f"invalid segment name {shown(name)!r}: {problem}"
            return ErrorMessage(rid, shown(name), message, ILLEGAL_ARGUMENT)
    return None


def encode_reply(reply: Reply) -> bytes:
    """``encode(reply)``, or an ErrorMessage saying why the reply could not be sent."""
    try:
        return encode(reply)
    except LocalProtocolError as e:
        rid = getattr(reply, "request_id", -1)
        segment = next(
            (
                v
                for a in ("segment", "target", "segment_name")
                if isinstance(v := getattr(reply, a, None), str)
            ),
            "",
        )
        log.warning("cannot encode %s: %s", type(reply).__name__, shown(str(e)))
        message = shown(f"the {type(reply).__name__} reply cannot be encoded: {e}")
        return encode(
            ErrorMessage(rid if isinstance(rid, int) else -1, shown(segment), message, UNSPECIFIED)
        )


class PeerLog:
    """Log lines about misbehaving peers, at most ``per_second`` a second: a flood of bad
    connections must not turn into a flood of log lines (CPU, disk). Lines over the
    limit are counted and reported in one line when the next second starts."""

    def __init__(self, per_second: int = 20, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_second = per_second
        self.clock = clock
        self._window = -1.0
        self._count = 0
        self.dropped = 0

    def __call__(self, level: int, message: str, *args: object) -> None:
        now = self.clock()
        if now - self._window >= 1.0:
            if self.dropped:
                log.warning("%d more lines about bad connections were not logged", self.dropped)
            self._window, self._count, self.dropped = now, 0, 0
        if self._count < self.per_second:
            self._count += 1
            log.log(level, message, *args)
        else:
            self.dropped += 1


PEER_LOG = PeerLog()
