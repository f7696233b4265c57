"""Names and ids: segment and table names, checked by the SDK before a request that
names one is sent, and writer ids (a string or UUID, always the same UUID for a string).

Contract: the name rule itself is the shared one in ``protocol/names.py`` (the server applies
the same); this module only turns a refusal into the SDK's :class:`InvalidSegmentName`,
so a bad name never reaches the encoder (whose error would be about a wire string, not
about the name) nor the server.
"""

from __future__ import annotations

import uuid
from typing import Final

from .errors import InvalidSegmentName
from .protocol.names import name_problem


def checked_name(name: str, kind: str = "segment") -> str:
    """Return ``name`` unchanged, or raise :class:`InvalidSegmentName` saying which name
    and why (``kind`` is "segment" or "table", for the message).

    Example::

        checked_name("orders/0")        # 'orders/0'
        checked_name("")                # InvalidSegmentName: invalid segment name '': ...
    """
    if not isinstance(name, str):
        raise TypeError(f"a {kind} name is a str, not {type(name).__name__}")
    problem = name_problem(name)
    if problem is None:
        return name
    shown = name if len(name) <= 80 else f"{name[:77]}... ({len(name)} characters)"
    raise InvalidSegmentName(f"invalid {kind} name {shown!r}: {problem}")


WRITER_NAMESPACE: Final = uuid.UUID("6f1d1a52-2c57-4b8e-9a53-5e9a0d3c1f00")
"""Namespace for turning a non-UUID string ``writer_id`` into a UUID (uuid5)."""


def writer_uuid(writer_id: str | uuid.UUID | None) -> uuid.UUID:
    """The UUID a writer id stands for: a UUID as is, a UUID string parsed, any other
    string hashed with uuid5 (stable across processes), None a fresh random id.

    Example::

        writer_uuid("spark-query-7/partition-3")  # the same UUID in every process
    """
    if writer_id is None:
        return uuid.uuid4()
    if isinstance(writer_id, uuid.UUID):
        return writer_id
    try:
        return uuid.UUID(writer_id)
    except ValueError:
        return uuid.uuid5(WRITER_NAMESPACE, writer_id)
