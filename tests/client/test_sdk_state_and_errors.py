"""Tables as data (issue 14): the writer's session states walked pair by pair, and the
reply-to-exception table checked against every reply class of the protocol."""

from __future__ import annotations

import uuid

import pytest
from segmentstore_client import errors, protocol, replies
from segmentstore_client.protocol.commands import COMMAND_TYPES
from segmentstore_client.writer_state import (
    IGNORED,
    TRANSITIONS,
    InvalidTransition,
    WriterInput,
    WriterState,
    next_state,
)

S, In = WriterState, WriterInput

# What each pair must do: a target state, "stay" (ignored), or "bug" (InvalidTransition).
EXPECTED: dict[tuple[WriterState, WriterInput], WriterState | str] = {
    (S.NEW, In.START): S.STARTING,
    (S.NEW, In.START_CANCELLED): "bug",
    (S.NEW, In.SET_UP): "bug",
    (S.NEW, In.CONNECTION_LOST): "stay",
    (S.NEW, In.FAIL): S.FAILED,
    (S.NEW, In.CLOSE): S.CLOSED,
    (S.STARTING, In.START): "stay",
    (S.STARTING, In.START_CANCELLED): S.NEW,
    (S.STARTING, In.SET_UP): S.OPEN,
    (S.STARTING, In.CONNECTION_LOST): "stay",
    (S.STARTING, In.FAIL): S.FAILED,
    (S.STARTING, In.CLOSE): S.CLOSED,
    (S.OPEN, In.START): "stay",
    (S.OPEN, In.START_CANCELLED): "bug",
    (S.OPEN, In.SET_UP): "stay",
    (S.OPEN, In.CONNECTION_LOST): S.RECONNECTING,
    (S.OPEN, In.FAIL): S.FAILED,
    (S.OPEN, In.CLOSE): S.CLOSED,
    (S.RECONNECTING, In.START): "stay",
    (S.RECONNECTING, In.START_CANCELLED): "bug",
    (S.RECONNECTING, In.SET_UP): S.OPEN,
    (S.RECONNECTING, In.CONNECTION_LOST): "stay",
    (S.RECONNECTING, In.FAIL): S.FAILED,
    (S.RECONNECTING, In.CLOSE): S.CLOSED,
    (S.FAILED, In.START): "stay",
    (S.FAILED, In.START_CANCELLED): "stay",
    (S.FAILED, In.SET_UP): "stay",
    (S.FAILED, In.CONNECTION_LOST): "stay",
    (S.FAILED, In.FAIL): "stay",
    (S.FAILED, In.CLOSE): S.CLOSED,
    (S.CLOSED, In.START): "stay",
    (S.CLOSED, In.START_CANCELLED): "stay",
    (S.CLOSED, In.SET_UP): "stay",
    (S.CLOSED, In.CONNECTION_LOST): "stay",
    (S.CLOSED, In.FAIL): "stay",
    (S.CLOSED, In.CLOSE): "stay",
}


def test_every_state_input_pair() -> None:
    pairs = [(s, i) for s in WriterState for i in WriterInput]
    assert set(EXPECTED) == set(pairs)  # the walk covers every pair
    assert not set(TRANSITIONS) & IGNORED  # no pair is both
    for (state, event), want in EXPECTED.items():
        if want == "bug":
            assert (state, event) not in TRANSITIONS and (state, event) not in IGNORED
            with pytest.raises(InvalidTransition, match=event.value):
                next_state(state, event)
        elif want == "stay":
            assert next_state(state, event) is state, (state, event)
        else:
            assert next_state(state, event) is want, (state, event)


def test_closed_is_final_and_failed_only_closes() -> None:
    for event in WriterInput:
        assert next_state(S.CLOSED, event) is S.CLOSED
        assert next_state(S.FAILED, event) in (S.FAILED, S.CLOSED)
    reachable = {S.NEW}
    for _ in range(len(WriterState)):
        reachable |= {t for (s, _), t in TRANSITIONS.items() if s in reachable}
    assert reachable == set(WriterState)


def reply_classes() -> list[type[protocol.Command]]:
    return [c for c in COMMAND_TYPES.values() if c.DIRECTION in ("reply", "both")]


def test_every_reply_class_has_an_entry() -> None:
    missing = [c.__name__ for c in reply_classes() if c not in replies.REPLY_ERRORS]
    assert missing == []
    assert len(replies.REPLY_ERRORS) == len(reply_classes())


def test_every_error_reply_maps_to_a_named_exception() -> None:
    seg, wid = "sc/st/0", uuid.uuid4()
    named = {
        protocol.NoSuchSegment(1, seg, "", -1): errors.NoSuchSegment,
        protocol.SegmentAlreadyExists(1, seg, ""): errors.SegmentAlreadyExists,
        protocol.SegmentIsSealed(1, seg, "", 5): errors.SegmentSealed,
        protocol.SegmentIsTruncated(1, seg, 100, "", 50): errors.SegmentTruncated,
        protocol.WrongHost(1, seg, "", ""): errors.WrongHost,
        protocol.AuthTokenCheckFailed(1, "", 1): errors.TokenExpired,
        protocol.AuthTokenCheckFailed(1, "", 0): errors.AuthenticationFailed,
        protocol.OperationUnsupported(1, "mergeSegments", ""): errors.OperationUnsupported,
        protocol.ErrorMessage(1, seg, "bad", 0): errors.InvalidArgument,
        protocol.ConditionalCheckFailed(wid, 3, 1): errors.ConditionalCheckFailed,
        protocol.InvalidEventNumber(wid, 1, "", 3): errors.WriterFenced,
        protocol.TableKeyDoesNotExist(1, seg, ""): errors.TableKeyDoesNotExist,
        protocol.TableKeyBadVersion(1, seg, ""): errors.TableKeyBadVersion,
        protocol.TableSegmentNotEmpty(1, seg, ""): errors.TableNotEmpty,
        protocol.SegmentAttributeUpdated(1, False): errors.AttributeConflict,
        protocol.SegmentTruncated(1, seg): errors.SegmentTruncated,
    }
    for reply, exc in named.items():
        err = replies.error_from_reply(reply)
        assert type(err) is exc, (reply, err)
        assert isinstance(err, errors.ServerError) and err.reply is reply
    error_classes = {c for c in reply_classes() if issubclass(c, protocol.ErrorReply)}
    assert error_classes <= {type(r) for r in named}
    # a success reply reaching the table does not answer its request
    for cls in reply_classes():
        if replies.REPLY_ERRORS[cls] is replies._unexpected:
            assert cls not in error_classes
    ok = replies.error_from_reply(protocol.SegmentAttributeUpdated(1, True))
    assert isinstance(ok, errors.UnexpectedReply)
