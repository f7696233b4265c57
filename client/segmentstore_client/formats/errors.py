"""Errors of the exact formats (Kafka messages, namespaced events, ...).

Every decoding failure is one of these named errors, never a wrong record. They derive
from :class:`~segmentstore_client.errors.CorruptRecord` (itself a ``ValueError``), so code
that already catches damaged records catches these too. Retrying never helps.

Example::

    from segmentstore_client.formats import kafka, errors
    try:
        kafka.decode_message(data)
    except errors.CrcMismatch:
        ...
"""

from __future__ import annotations

from ..errors import CodecUnavailable, CorruptRecord

__all__ = [
    "CodecUnavailable",
    "CrcMismatch",
    "DamagedEvent",
    "FormatError",
    "InvalidLayout",
    "TooLarge",
    "TruncatedInput",
]


class FormatError(CorruptRecord):
    """Bytes that are not a valid record of the format they were decoded as."""


class TruncatedInput(FormatError):
    """The input ends before the record it starts is complete."""


class CrcMismatch(FormatError):
    """A stored checksum does not match the bytes it covers (a flipped bit, a torn write)."""


class InvalidLayout(FormatError):
    """A length, flag, version or attribute the format does not allow."""


class TooLarge(InvalidLayout):
    """A declared length above the decoder's limit (rejected before buffering the body)."""


class DamagedEvent(FormatError):
    """A formatted reader met an event that does not decode (``errors="raise"``).

    ``segment`` and ``offset`` say where the event is, ``next_offset`` where the one
    after it starts (the reader is positioned there, so the next read skips it), and
    ``cause`` is the format's own error (``CrcMismatch``, ``TruncatedInput``, ...).
    """

    def __init__(self, segment: str, offset: int, next_offset: int, cause: Exception) -> None:
        super().__init__(f"damaged event in {segment!r} at offset {offset}: {cause}")
        self.segment = segment
        self.offset = offset
        self.next_offset = next_offset
        self.cause = cause
