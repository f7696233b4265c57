"""The SDK's exception hierarchy.

Every error the SDK raises derives from :class:`SegmentStoreError`. Each error says
whether retrying the same operation can help (``retriable``), the way aiokafka does.
Codec errors are split as h11 splits them: :class:`LocalProtocolError` means *we* tried
to encode something the protocol cannot carry; :class:`RemoteProtocolError` means the
peer sent bytes that are not valid Pravega wire protocol (the connection must close).
"""

from __future__ import annotations


class SegmentStoreError(Exception):
    """Base class of every error raised by segmentstore_client."""

    retriable: bool = False


class ProtocolError(SegmentStoreError):
    """The byte stream violates the Pravega wire protocol."""


class LocalProtocolError(ProtocolError):
    """We were asked to encode something the wire format cannot represent."""


class RemoteProtocolError(ProtocolError):
    """The peer sent an invalid frame; the connection cannot be used any more."""


class FrameTooLarge(RemoteProtocolError):
    """A frame header declared a negative length or one above the maximum frame size."""


class UnknownCommandType(RemoteProtocolError):
    """A frame header carried a type code that no Pravega command uses."""


class MalformedCommand(RemoteProtocolError):
    """A frame's payload does not parse as the command its type code names."""
