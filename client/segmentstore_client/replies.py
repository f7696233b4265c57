"""Server replies to SDK exceptions: one table keyed by reply class.

Contract: :data:`REPLY_ERRORS` has an entry for every reply class of the protocol (a
test checks it). An error reply maps to its named exception; a reply that reports
success maps to :class:`UnexpectedReply`, since reaching :func:`error_from_reply` with
one means it does not answer the request it came for (the callers handle the replies
they expect before asking here). Two success replies double as errors where the protocol
uses them so: ``SegmentAttributeUpdated(success=False)`` is an :class:`AttributeConflict`
and ``SegmentTruncated`` answering a LocateOffset is a :class:`SegmentTruncated` error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from . import errors as e
from . import protocol as p

Builder = Callable[[Any, str, str], e.SegmentStoreError]
"""Makes the exception for ``(reply, segment, detail)``; ``detail`` is ": <server stack
trace>" or ""."""


def _no_such_segment(r: Any, segment: str, detail: str) -> e.SegmentStoreError:
    return e.NoSuchSegment(f"segment {segment!r} does not exist{detail}", segment, r)


def _already_exists(r: Any, segment: str, detail: str) -> e.SegmentStoreError:
    return e.SegmentAlreadyExists(f"segment {segment!r} already exists{detail}", segment, r)


def _is_sealed(r: Any, segment: str, detail: str) -> e.SegmentStoreError:
    offset = int(getattr(r, "offset", -1))
    return e.SegmentSealed(f"segment {segment!r} is sealed{detail}", segment, r, offset)


def _is_truncated(r: p.SegmentIsTruncated, segment: str, detail: str) -> e.SegmentStoreError:
    start, offset = r.start_offset, r.offset
    return e.SegmentTruncated(
        f"segment {segment!r}: offset {offset} is outside the readable range "
        f"(start offset {start}){detail}",
        segment,
        r,
        start,
        offset,
    )


def _index_truncated(r: Any, segment: str, detail: str) -> e.SegmentStoreError:
    # LocateOffset's odd use of a success code as an error
    return e.SegmentTruncated(f"segment {segment!r}: index truncated{detail}", segment, r)


def _wrong_host(r: Any, segment: str, detail: str) -> e.SegmentStoreError:
    return e.WrongHost(f"segment {segment!r} is not owned by this server{detail}", segment, r)


def _auth_failed(r: p.AuthTokenCheckFailed, segment: str, detail: str) -> e.SegmentStoreError:
    if r.error_code == 1:
        return e.TokenExpired(f"delegation token expired{detail}", segment, r)
    return e.AuthenticationFailed(f"delegation token refused{detail}", segment, r)


def _unsupported(r: p.OperationUnsupported, segment: str, detail: str) -> e.SegmentStoreError:
    op = r.operation_name
    return e.OperationUnsupported(f"operation {op!r} is not supported{detail}", segment, r)


def _error_message(r: p.ErrorMessage, segment: str, detail: str) -> e.SegmentStoreError:
    if r.error_code == 0:  # ILLEGAL_ARGUMENT
        return e.InvalidArgument(f"server refused the request: {r.message}", segment, r)
    return e.ServerFailure(f"server failed the request: {r.message}", segment, r)


def _conditional_failed(
    r: p.ConditionalCheckFailed, segment: str, detail: str
) -> e.SegmentStoreError:
    return e.ConditionalCheckFailed(
        "conditional append: the segment's length is not the expected offset",
        segment,
        r,
        r.event_number,
    )


def _fenced(r: p.InvalidEventNumber, segment: str, detail: str) -> e.SegmentStoreError:
    return e.WriterFenced(
        f"writer {r.writer_id} was fenced: its event numbers do not follow what the "
        f"segment holds (another writer with the same id?){detail}",
        segment,
        r,
    )


def _key_missing(r: Any, segment: str, detail: str) -> e.SegmentStoreError:
    return e.TableKeyDoesNotExist(
        f"table {segment!r}: a conditional key does not exist{detail}", segment, r
    )


def _key_version(r: Any, segment: str, detail: str) -> e.SegmentStoreError:
    return e.TableKeyBadVersion(
        f"table {segment!r}: a conditional key has another version{detail}", segment, r
    )


def _not_empty(r: Any, segment: str, detail: str) -> e.SegmentStoreError:
    return e.TableNotEmpty(f"table {segment!r} is not empty{detail}", segment, r)


def _attribute_updated(
    r: p.SegmentAttributeUpdated, segment: str, detail: str
) -> e.SegmentStoreError:
    if r.success:
        return _unexpected(r, segment, detail)
    return e.AttributeConflict("attribute compare-and-set failed", segment, r)


def _unexpected(r: Any, segment: str, detail: str) -> e.SegmentStoreError:
    return e.UnexpectedReply(f"unexpected reply {r!r}", segment, r)


REPLY_ERRORS: Final[dict[type[p.Command], Builder]] = {
    # error replies
    p.NoSuchSegment: _no_such_segment,
    p.SegmentAlreadyExists: _already_exists,
    p.SegmentIsSealed: _is_sealed,
    p.SegmentIsTruncated: _is_truncated,
    p.WrongHost: _wrong_host,
    p.AuthTokenCheckFailed: _auth_failed,
    p.OperationUnsupported: _unsupported,
    p.ErrorMessage: _error_message,
    p.ConditionalCheckFailed: _conditional_failed,
    p.InvalidEventNumber: _fenced,
    p.TableKeyDoesNotExist: _key_missing,
    p.TableKeyBadVersion: _key_version,
    p.TableSegmentNotEmpty: _not_empty,
    # success replies the protocol also uses to say no
    p.SegmentAttributeUpdated: _attribute_updated,
    p.SegmentTruncated: _index_truncated,
    # success replies: here only when they do not answer the request
    p.AppendSetup: _unexpected,
    p.DataAppended: _unexpected,
    p.OffsetLocated: _unexpected,
    p.SegmentAttribute: _unexpected,
    p.SegmentCreated: _unexpected,
    p.SegmentDeleted: _unexpected,
    p.SegmentPolicyUpdated: _unexpected,
    p.SegmentRead: _unexpected,
    p.SegmentSealed: _unexpected,
    p.SegmentsBatchMerged: _unexpected,
    p.SegmentsMerged: _unexpected,
    p.StorageChunksListed: _unexpected,
    p.StorageFlushed: _unexpected,
    p.StreamSegmentInfo: _unexpected,
    p.TableEntriesDeltaRead: _unexpected,
    p.TableEntriesRead: _unexpected,
    p.TableEntriesUpdated: _unexpected,
    p.TableKeysRead: _unexpected,
    p.TableKeysRemoved: _unexpected,
    p.TableRead: _unexpected,
    p.TableSegmentInfo: _unexpected,
    # never replies to a request
    p.Hello: _unexpected,
    p.KeepAlive: _unexpected,
}
"""The exception builder for each reply class of the protocol."""


def error_from_reply(reply: object) -> e.SegmentStoreError:
    """The named exception for a server reply that is not the answer its request wanted.

    Example::

        err = error_from_reply(protocol.NoSuchSegment(7, "sc/st/0", "", -1))
        assert isinstance(err, errors.NoSuchSegment) and not err.retriable
    """
    segment = str(getattr(reply, "segment", "") or "")
    trace = str(getattr(reply, "server_stack_trace", "") or "")
    build = REPLY_ERRORS.get(type(reply), _unexpected)  # type: ignore[arg-type]
    return build(reply, segment, f": {trace}" if trace else "")
