"""Event records: the ``(type 0, length, payload)`` framing that wraps every event inside
append data and therefore inside segment data, so that any Pravega reader can split a
segment back into events.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from ..errors import MalformedCommand
from .primitives import HEADER, Buffer

EVENT_HEADER_SIZE: Final = 8
MAX_EVENT_SIZE: Final = 8 * 1024 * 1024
"""Largest event payload the Pravega clients send in one record."""

_pack = HEADER.pack


def frame_event(payload: Buffer) -> bytes:
    """One event record: 8-byte header + payload."""
    return _pack(0, len(payload)) + bytes(payload)


def frame_events(payloads: Iterable[Buffer]) -> bytes:
    """Concatenated event records for ``payloads``, built with one join."""
    parts: list[Buffer] = []
    append = parts.append
    for p in payloads:
        append(_pack(0, len(p)))
        append(p)
    return b"".join(parts)


class EventParser:
    """Split a segment's byte stream into events, across reads that cut records anywhere.

    ``feed(data)`` takes the next contiguous bytes and returns ``(offset, payload)`` for
    every record it completes, ``offset`` being the segment offset of the record's header.
    A record with a type other than 0 or a negative length means the segment does not hold
    event records (or is corrupt) and raises :class:`MalformedCommand`.
    """

    __slots__ = ("_buf", "_offset", "max_event_size")

    def __init__(self, offset: int = 0, max_event_size: int = 64 * 1024 * 1024) -> None:
        self._buf = bytearray()
        self._offset = offset  # segment offset of self._buf[0]
        self.max_event_size = max_event_size

    @property
    def offset(self) -> int:
        """Segment offset of the first byte not yet returned as part of an event."""
        return self._offset

    @property
    def pending(self) -> int:
        return len(self._buf)

    def feed(self, data: Buffer) -> list[tuple[int, bytes]]:
        buf = self._buf
        if buf:
            buf += data
            src: Buffer = buf
        else:
            src = data
        out: list[tuple[int, bytes]] = []
        mv = memoryview(src)
        n = len(mv)
        pos = 0
        base = self._offset
        unpack = HEADER.unpack_from
        try:
            while n - pos >= 8:
                t, length = unpack(mv, pos)
                if t != 0 or length < 0 or length > self.max_event_size:
                    raise MalformedCommand(
                        f"no event record at segment offset {base + pos} (type {t}, length {length})"
                    )
                end = pos + 8 + length
                if end > n:
                    break
                out.append((base + pos, bytes(mv[pos + 8 : end])))
                pos = end
            rest = bytes(mv[pos:]) if pos < n else b""
        finally:
            mv.release()
        self._buf = bytearray(rest)
        self._offset = base + pos
        return out
