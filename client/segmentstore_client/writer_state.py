"""The event writer's append session as a state machine: a table of allowed transitions.

Contract: pure data and one function, no I/O (h11's ``_state.py`` is the model). Every
(state, input) pair is either a transition in :data:`TRANSITIONS`, a no-op listed in
:data:`IGNORED` (the input may legitimately arrive late in that state, and changes
nothing), or a bug in the writer, for which :func:`next_state` raises
:class:`InvalidTransition`. The writer changes its state only through ``next_state``.

::

    NEW --START--> STARTING --SET_UP--> OPEN --CONNECTION_LOST--> RECONNECTING
     ^                |                  ^                            |
     +--START_CANCELLED                  +-----------SET_UP-----------+
    any of NEW, STARTING, OPEN, RECONNECTING --FAIL--> FAILED
    every state --CLOSE--> CLOSED (final)
"""

from __future__ import annotations

import enum
from typing import Final

from .errors import ClientError


class WriterState(enum.Enum):
    """Where an event writer's append session is."""

    NEW = "new"  # made, not started: nothing sent
    STARTING = "starting"  # first SetupAppend on its way
    OPEN = "open"  # set up on a connection: blocks are sent as they seal
    RECONNECTING = "reconnecting"  # connection lost: blocks wait, a new setup is under way
    FAILED = "failed"  # an error stopped it: every unacknowledged event failed with it
    CLOSED = "closed"  # closed or aborted: final


class WriterInput(enum.Enum):
    """What happens to a writer's session."""

    START = "start"  # start() (or the first write) was called
    START_CANCELLED = "start cancelled"  # the caller of the first start() was cancelled
    SET_UP = "set up"  # AppendSetup arrived (first setup, or after a reconnect)
    CONNECTION_LOST = "connection lost"  # the session's connection broke
    FAIL = "fail"  # an error the writer cannot get past (or abort())
    CLOSE = "close"  # close() finished, or abort()


class InvalidTransition(ClientError):
    """The writer tried a state change its table does not allow: a bug in the SDK."""


S, In = WriterState, WriterInput

TRANSITIONS: Final[dict[tuple[WriterState, WriterInput], WriterState]] = {
    (S.NEW, In.START): S.STARTING,
    (S.NEW, In.FAIL): S.FAILED,
    (S.NEW, In.CLOSE): S.CLOSED,
    (S.STARTING, In.START_CANCELLED): S.NEW,
    (S.STARTING, In.SET_UP): S.OPEN,
    (S.STARTING, In.FAIL): S.FAILED,
    (S.STARTING, In.CLOSE): S.CLOSED,
    (S.OPEN, In.CONNECTION_LOST): S.RECONNECTING,
    (S.OPEN, In.FAIL): S.FAILED,
    (S.OPEN, In.CLOSE): S.CLOSED,
    (S.RECONNECTING, In.SET_UP): S.OPEN,
    (S.RECONNECTING, In.FAIL): S.FAILED,
    (S.RECONNECTING, In.CLOSE): S.CLOSED,
    (S.FAILED, In.CLOSE): S.CLOSED,
}
"""The state an input moves a writer to."""

IGNORED: Final[frozenset[tuple[WriterState, WriterInput]]] = frozenset(
    {
        # start() on a writer already started waits for / reports that start
        (S.STARTING, In.START),
        (S.OPEN, In.START),
        (S.RECONNECTING, In.START),
        (S.FAILED, In.START),
        (S.CLOSED, In.START),
        # a setup that completes after the writer failed or closed is dropped; a late
        # duplicate AppendSetup on an open session changes nothing
        (S.OPEN, In.SET_UP),
        (S.FAILED, In.SET_UP),
        (S.CLOSED, In.SET_UP),
        # only an open session has a connection to lose
        (S.NEW, In.CONNECTION_LOST),
        (S.STARTING, In.CONNECTION_LOST),
        (S.RECONNECTING, In.CONNECTION_LOST),
        (S.FAILED, In.CONNECTION_LOST),
        (S.CLOSED, In.CONNECTION_LOST),
        # a start cancelled after the writer failed or closed leaves it so
        (S.FAILED, In.START_CANCELLED),
        (S.CLOSED, In.START_CANCELLED),
        # the first error wins
        (S.FAILED, In.FAIL),
        (S.CLOSED, In.FAIL),
        (S.CLOSED, In.CLOSE),
    }
)
"""Inputs that may arrive in a state and leave it as it is."""

del S, In


def next_state(state: WriterState, event: WriterInput) -> WriterState:
    """The state after ``event`` in ``state``; raises :class:`InvalidTransition` for a
    pair the table neither allows nor ignores.

    Example::

        next_state(WriterState.OPEN, WriterInput.CONNECTION_LOST)  # RECONNECTING
    """
    target = TRANSITIONS.get((state, event))
    if target is not None:
        return target
    if (state, event) in IGNORED:
        return state
    raise InvalidTransition(
        f"event writer: {event.value!r} is not allowed in state {state.value!r}"
    )
