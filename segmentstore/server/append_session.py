"""The append session of one writer on one connection, as a table of transitions (h11
style): ``step(state, event) -> (next state, action)``; a pair not in the table is a
protocol violation (the connection closes without a reply, reference 12.2).

States: NEW (no session: before SetupAppend, or after it was refused), OPEN (set up,
appends flow), FAILED (an error ended the session; outcomes of appends still on their way
are dropped; data needs a new SetupAppend first), CLOSED (the connection is gone, or is
closing after InvalidEventNumber).

Events, classified by the connection (``appends.py``):

* SETUP / SETUP_REFUSED: SetupAppend answered AppendSetup / an error reply.
* DATA: an append whose event number is above everything stored in this session.
* RESENT: an append whose event number is at or below the one AppendSetup returned, i.e.
  already durable: acknowledged without storing (reference 7.2: conforming clients do not
  resend those, but one that does gets its DataAppended instead of silence).
* REPEATED: an event number this connection already sent in this session (equal to or
  below the last one stored, above the AppendSetup value): InvalidEventNumber and close,
  as reference 7.6 recommends (Java would store it twice and never acknowledge it).
* STORED / CONDITION_FAILED / FENCED / STORE_FAILED: the store's outcome of one append
  (FENCED: another connection moved the writer's attribute, reference 7.6 step 3.2).
* LOST: the connection closed.
"""

from __future__ import annotations

import enum
from typing import Final


class Session(enum.Enum):
    NEW = "new"
    OPEN = "open"
    FAILED = "failed"
    CLOSED = "closed"


class Event(enum.Enum):
    SETUP = "setup"
    SETUP_REFUSED = "setup refused"
    DATA = "data"
    RESENT = "resent data"
    REPEATED = "repeated data"
    STORED = "stored"
    CONDITION_FAILED = "condition failed"
    FENCED = "fenced"
    STORE_FAILED = "store failed"
    LOST = "connection lost"


class Action(enum.Enum):
    REPLY_APPEND_SETUP = "reply AppendSetup"
    REPLY_SETUP_ERROR = "reply the setup's error"
    STORE = "store the append"
    ACK_WITHOUT_STORING = "acknowledge without storing"
    ACK = "acknowledge (DataAppended) if the number is new"
    REPLY_CONDITIONAL_FAILED = "reply ConditionalCheckFailed"
    REJECT = "reply InvalidEventNumber and close"
    REPLY_ERROR = "reply the append's error, drop the session"
    DROP = "nothing: the session already ended"


class SessionViolation(Exception):
    """A (state, event) pair the protocol does not allow: close without a reply."""


S, E, A = Session, Event, Action
_OUTCOMES: Final = (E.STORED, E.CONDITION_FAILED, E.FENCED, E.STORE_FAILED)

TRANSITIONS: Final[dict[tuple[Session, Event], tuple[Session, Action]]] = {
    (S.NEW, E.SETUP): (S.OPEN, A.REPLY_APPEND_SETUP),
    (S.NEW, E.SETUP_REFUSED): (S.NEW, A.REPLY_SETUP_ERROR),
    (S.OPEN, E.SETUP): (S.OPEN, A.REPLY_APPEND_SETUP),
    (S.OPEN, E.SETUP_REFUSED): (S.NEW, A.REPLY_SETUP_ERROR),
    (S.FAILED, E.SETUP): (S.OPEN, A.REPLY_APPEND_SETUP),
    (S.FAILED, E.SETUP_REFUSED): (S.NEW, A.REPLY_SETUP_ERROR),
    (S.OPEN, E.DATA): (S.OPEN, A.STORE),
    (S.OPEN, E.RESENT): (S.OPEN, A.ACK_WITHOUT_STORING),
    (S.OPEN, E.REPEATED): (S.CLOSED, A.REJECT),
    (S.OPEN, E.STORED): (S.OPEN, A.ACK),
    (S.OPEN, E.CONDITION_FAILED): (S.OPEN, A.REPLY_CONDITIONAL_FAILED),
    (S.OPEN, E.FENCED): (S.CLOSED, A.REJECT),
    (S.OPEN, E.STORE_FAILED): (S.FAILED, A.REPLY_ERROR),
    **{(S.FAILED, e): (S.FAILED, A.DROP) for e in _OUTCOMES},
    **{(S.CLOSED, e): (S.CLOSED, A.DROP) for e in _OUTCOMES},
    **{(s, E.LOST): (S.CLOSED, A.DROP) for s in Session},
}


def step(state: Session, event: Event) -> tuple[Session, Action]:
    """The next state and what to do; ``SessionViolation`` if the pair is not allowed."""
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise SessionViolation(f"{event.value} in state {state.value}") from None


def classify(event_number: int, setup_value: int, last_stored: int) -> Event:
    """DATA, RESENT or REPEATED for an append's (last) event number in an open session."""
    if event_number <= setup_value:
        return Event.RESENT
    if event_number <= last_stored:
        return Event.REPEATED
    return Event.DATA
