"""The append session's transition table, walked pair by pair against the rules written
out independently here; and the resend cases on a live server (issue 14): a resend of
acknowledged event numbers after SetupAppend is acknowledged without storing, a repeat on
the same connection gets InvalidEventNumber and a close."""

from __future__ import annotations

import itertools
import uuid

import pytest
from segmentstore_client.protocol import (
    NULL_ATTRIBUTE_VALUE,
    DataAppended,
    InvalidEventNumber,
    block_end,
    frame_event,
)

from segmentstore.server.append_session import (
    TRANSITIONS,
    Action,
    Event,
    Session,
    SessionViolation,
    classify,
    step,
)

from .wire import WireClient, next_id, unique

S, E, A = Session, Event, Action


def rule(state: Session, event: Event) -> tuple[Session, Action] | None:
    """The protocol as prose (reference 7.2-7.9), None where it is a violation."""
    if event is E.LOST:
        return S.CLOSED, A.DROP
    if event in (E.SETUP, E.SETUP_REFUSED):
        if state is S.CLOSED:
            return None
        return (S.OPEN, A.REPLY_APPEND_SETUP) if event is E.SETUP else (S.NEW, A.REPLY_SETUP_ERROR)
    if event in (E.DATA, E.RESENT, E.REPEATED):
        if state is not S.OPEN:
            return None  # data without a session: close without a reply
        return {
            E.DATA: (S.OPEN, A.STORE),
            E.RESENT: (S.OPEN, A.ACK_WITHOUT_STORING),
            E.REPEATED: (S.CLOSED, A.REJECT),
        }[event]
    # The store's outcome of an append.
    if state is S.NEW:
        return None  # no append can be on its way without a session
    if state in (S.FAILED, S.CLOSED):
        return state, A.DROP
    return {
        E.STORED: (S.OPEN, A.ACK),
        E.CONDITION_FAILED: (S.OPEN, A.REPLY_CONDITIONAL_FAILED),
        E.FENCED: (S.CLOSED, A.REJECT),
        E.STORE_FAILED: (S.FAILED, A.REPLY_ERROR),
    }[event]


@pytest.mark.parametrize(("state", "event"), list(itertools.product(Session, Event)))
def test_every_state_and_event(state: Session, event: Event) -> None:
    want = rule(state, event)
    if want is None:
        assert (state, event) not in TRANSITIONS
        with pytest.raises(SessionViolation):
            step(state, event)
    else:
        assert step(state, event) == want


def test_classify() -> None:
    assert classify(5, setup_value=3, last_stored=3) is E.DATA
    assert classify(3, setup_value=3, last_stored=7) is E.RESENT
    assert classify(2, setup_value=3, last_stored=3) is E.RESENT
    assert classify(7, setup_value=3, last_stored=7) is E.REPEATED
    assert classify(4, setup_value=3, last_stored=7) is E.REPEATED
    assert classify(0, setup_value=NULL_ATTRIBUTE_VALUE, last_stored=NULL_ATTRIBUTE_VALUE) is E.DATA


def test_what_the_hot_path_takes_for_granted() -> None:
    """``Appends.block_end`` and ``Appends.appended`` skip ``classify`` and ``step`` for an
    open session: that is only right while the table and classify say so."""
    assert step(S.OPEN, E.DATA) == (S.OPEN, A.STORE)
    assert step(S.OPEN, E.STORED) == (S.OPEN, A.ACK)
    for setup, stored in ((3, 3), (3, 7), (NULL_ATTRIBUTE_VALUE, NULL_ATTRIBUTE_VALUE)):
        assert classify(stored + 1, setup, stored) is E.DATA


def event(n: int) -> bytes:
    return frame_event(b"event %d" % n)


async def write_three(client: WireClient, name: str, w: uuid.UUID) -> int:
    await client.create_segment(name)
    await client.setup_append(w, name)
    for n in (1, 2, 3):
        client.send(block_end(w, event(n), 1, n, next_id()))
    await client.wait_acked(w, 3)
    return (await client.info(name)).write_offset


async def test_resend_of_acknowledged_events_after_setup_is_acknowledged_not_stored(
    client: WireClient, client2: WireClient
) -> None:
    name, w = unique("resend"), uuid.uuid4()
    length = await write_three(client, name, w)
    await client.close()
    assert await client2.setup_append(w, name) == 3
    rids = [next_id(), next_id()]
    client2.send(block_end(w, event(2), 1, 2, rids[0]), block_end(w, event(3), 1, 3, rids[1]))
    for rid, n in zip(rids, (2, 3), strict=True):
        ack = await client2.wait_for(
            lambda c, rid=rid: isinstance(c, DataAppended) and c.request_id == rid
        )
        assert isinstance(ack, DataAppended)
        assert ack.event_number == n and ack.previous_event_number < n
        assert ack.current_segment_write_offset == length
    assert (await client2.info(name)).write_offset == length  # nothing stored twice
    rid = next_id()
    client2.send(block_end(w, event(4), 1, 4, rid))
    ack4 = await client2.wait_acked(w, 4)
    assert ack4.previous_event_number == 3 and ack4.request_id == rid
    assert ack4.current_segment_write_offset > length


@pytest.mark.parametrize("number", [3, 2], ids=["repeated", "backwards"])
async def test_repeat_on_the_same_connection_gets_invalid_event_number(
    client: WireClient, number: int
) -> None:
    name, w = unique("repeat"), uuid.uuid4()
    length = await write_three(client, name, w)
    rid = next_id()
    client.send(block_end(w, event(number), 1, number, rid))
    reply = await client.wait_for(lambda c: isinstance(c, InvalidEventNumber))
    assert reply == InvalidEventNumber(w, rid, "", number)
    await client.wait_closed()
    async with await WireClient.connect(*client.writer.get_extra_info("peername")) as fresh:
        assert (await fresh.info(name)).write_offset == length
        assert await fresh.setup_append(w, name) == 3
