"""Segment and table names, checked by the SDK before a request that names one is sent.

Contract: the rule itself is the shared one in ``protocol/names.py`` (the server applies
the same); this module only turns a refusal into the SDK's :class:`InvalidSegmentName`,
so a bad name never reaches the encoder (whose error would be about a wire string, not
about the name) nor the server.
"""

from __future__ import annotations

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
