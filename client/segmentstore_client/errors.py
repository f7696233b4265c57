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


# --- The SDK's errors -------------------------------------------------------------------
#
# Everything below is raised by the client: connection trouble (ConnectionLost, Timeout,
# ...), misuse caught locally (WriterClosed, EventTooLarge, ...) and every error reply a
# server can send, each mapped to one named exception by ``replies.error_from_reply``
# (a table keyed by reply class).


class ClientError(SegmentStoreError):
    """Something went wrong on the client side of a connection (not a server reply)."""


class ConnectionLost(ClientError):
    """The connection to the server closed or broke while a request was outstanding.

    Retrying helps: the SDK reconnects with backoff, and writers and readers do so on
    their own. A request that was in flight may or may not have been applied.
    """

    retriable = True


class ConnectFailed(ConnectionLost):
    """No connection could be opened to the server within the connect timeout.

    Retrying helps once the server is reachable again. ``refused`` says the last attempt
    was refused outright (nothing listens at the address, its name does not resolve, or
    what answers speaks another protocol, such as HTTP on the metrics port):
    a client that never reached the server raises that at once instead of retrying.
    """

    refused: bool = False


class Timeout(ClientError, TimeoutError):
    """A request got no reply within its timeout.

    Retrying may help (the server may just be slow); the request may have been applied.
    """

    retriable = True


class IncompatibleServer(ClientError):
    """The server's Hello names wire versions this client cannot speak. Retrying won't help."""


class ClientClosed(ClientError):
    """The client (or the writer or reader) was closed; it cannot be used any more."""


class WriterClosed(ClientClosed):
    """The event writer was closed, or failed earlier; create a new writer."""


class InvalidSegmentName(ClientError, ValueError):
    """A segment or table name the store refuses (empty, too long for the wire, control
    characters), caught before anything is sent; the message says which name and why.
    Retrying won't help."""


class EventTooLarge(ClientError, ValueError):
    """An event is bigger than the wire protocol allows (8 MiB). Retrying won't help."""


class CorruptData(ClientError):
    """Segment data does not parse as event records (it was written as raw bytes, or is
    damaged). Retrying won't help."""


class CorruptRecord(ClientError, ValueError):
    """A record envelope failed its CRC-32C check or does not parse. Retrying won't help."""


class CodecUnavailable(ClientError):
    """A record codec (lz4, zstd) needs a package that is not installed. Retrying won't help."""


class ServerError(SegmentStoreError):
    """The server answered a request with an error reply.

    ``segment`` names the segment the reply is about ("" if none); ``reply`` keeps the
    decoded reply command for logging.
    """

    def __init__(self, message: str, segment: str = "", reply: object = None) -> None:
        super().__init__(message)
        self.segment = segment
        self.reply = reply


class NoSuchSegment(ServerError):
    """The segment (or table) does not exist, or was deleted. Retrying won't help."""


class SegmentAlreadyExists(ServerError):
    """A segment (or table) of that name already exists. Retrying won't help."""


class SegmentSealed(ServerError):
    """The segment is sealed: it takes no more appends. Retrying won't help.

    On the append path ``event_number`` is the number of the first event the server
    refused (-1 if unknown); every event before it is durable.
    """

    def __init__(
        self, message: str, segment: str = "", reply: object = None, event_number: int = -1
    ) -> None:
        super().__init__(message, segment, reply)
        self.event_number = event_number


class SegmentTruncated(ServerError):
    """The offset asked for lies before the segment's start offset (it was truncated away),
    or is outside the range the operation allows. Retrying at the same offset won't help;
    ``start_offset`` is the first readable offset to resume from."""

    def __init__(
        self,
        message: str,
        segment: str = "",
        reply: object = None,
        start_offset: int = -1,
        offset: int = -1,
    ) -> None:
        super().__init__(message, segment, reply)
        self.start_offset = start_offset
        self.offset = offset


class WrongHost(ServerError):
    """This server does not own the segment's container. Retrying (elsewhere, or after the
    ownership moved) can help."""

    retriable = True


class AuthenticationFailed(ServerError):
    """The delegation token was refused. Retrying with the same token won't help."""


class TokenExpired(AuthenticationFailed):
    """The delegation token expired. Retrying with a fresh token helps."""

    retriable = True


class OperationUnsupported(ServerError):
    """The server does not support this operation. Retrying won't help."""


class InvalidArgument(ServerError):
    """The server refused the request's arguments (ErrorMessage code 0). Retrying won't help."""


class ServerFailure(ServerError):
    """The server could not carry out the request for a reason of its own (ErrorMessage
    with code -1: its storage failing or full, an internal error). Retrying later can
    help."""

    retriable = True


class ConditionalCheckFailed(ServerError):
    """A conditional append's expected offset did not match the segment's length, so
    nothing was appended. Retrying with the same offset won't help; re-read the length."""

    def __init__(
        self, message: str, segment: str = "", reply: object = None, event_number: int = -1
    ) -> None:
        super().__init__(message, segment, reply)
        self.event_number = event_number


class WriterFenced(ServerError):
    """The server refused this writer's event numbers: another connection is writing with
    the same writer id. Retrying won't help while that other writer is alive."""


class AttributeConflict(ServerError):
    """A compare-and-set on a segment attribute (or a conditional merge) found another
    value. Retrying with the same expected value won't help."""


class TableConditionFailed(ServerError):
    """A conditional table update or removal failed: nothing in the batch was applied.
    Retrying with the same versions won't help; read the key again.

    ``keys`` holds the keys of the batch that carried a condition (the server does not
    say which one failed; with one conditional key, that is the one)."""

    keys: tuple[bytes, ...] = ()


class TableKeyDoesNotExist(TableConditionFailed):
    """A key required to exist (a version was given) is absent. Retrying won't help."""


class TableKeyBadVersion(TableConditionFailed):
    """A key exists with another version than required (or exists although it must not).
    Retrying won't help."""


class TableNotEmpty(ServerError):
    """The table still holds keys and was to be deleted only if empty. Retrying won't help."""


class UnexpectedReply(ServerError):
    """The server answered with a command that does not fit the request. Retrying won't
    help; it points at a server or client bug."""
