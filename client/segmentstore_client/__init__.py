"""segmentstore_client: the Python SDK for segmentstore (and Pravega's wire protocol).

Async first::

    import segmentstore_client

    async with segmentstore_client.connect("tcp://127.0.0.1:12345") as client:
        await client.create_segment("orders/0", exist_ok=True)
        async with client.writer("orders/0") as writer:
            await writer.write(b"hello")
        async for event in client.reader("orders/0"):
            print(event.offset, event.data)

and blocking, for scripts, notebooks and Spark executors: ``segmentstore_client.sync``.
"""

import logging

from . import errors, records
from .admin import EVENT_COUNT_ATTRIBUTE, SegmentInfo, TableInfo
from .client import Client, connect
from .connection import ConnectionOptions, Endpoint
from .errors import (
    AttributeConflict,
    AuthenticationFailed,
    ClientClosed,
    CodecUnavailable,
    ConditionalCheckFailed,
    ConnectFailed,
    ConnectionLost,
    CorruptData,
    CorruptRecord,
    EventTooLarge,
    IncompatibleServer,
    InvalidArgument,
    InvalidSegmentName,
    NoSuchSegment,
    OperationUnsupported,
    SegmentAlreadyExists,
    SegmentSealed,
    SegmentStoreError,
    SegmentTruncated,
    ServerError,
    ServerFailure,
    TableConditionFailed,
    TableKeyBadVersion,
    TableKeyDoesNotExist,
    TableNotEmpty,
    Timeout,
    TokenExpired,
    WriterClosed,
    WriterFenced,
    WrongHost,
)
from .naming import writer_uuid
from .position import Position
from .reader import Event, EventReader, ReadChunk
from .table import MUST_NOT_EXIST, Table, TableChanges, TableEntry, TableKeyVersion
from .writer import Ack, EventWriter
from .writer_state import WriterState

__version__ = "0.1.0"

# The library logs to "segmentstore_client"; an application that configured no logging
# sees nothing on stderr (Python's last-resort handler would print WARNINGs otherwise).
logging.getLogger("segmentstore_client").addHandler(logging.NullHandler())

__all__ = [
    "EVENT_COUNT_ATTRIBUTE",
    "MUST_NOT_EXIST",
    "Ack",
    "AttributeConflict",
    "AuthenticationFailed",
    "Client",
    "ClientClosed",
    "CodecUnavailable",
    "ConditionalCheckFailed",
    "ConnectFailed",
    "ConnectionLost",
    "ConnectionOptions",
    "CorruptData",
    "CorruptRecord",
    "Endpoint",
    "Event",
    "EventReader",
    "EventTooLarge",
    "EventWriter",
    "IncompatibleServer",
    "InvalidArgument",
    "InvalidSegmentName",
    "NoSuchSegment",
    "OperationUnsupported",
    "Position",
    "ReadChunk",
    "SegmentAlreadyExists",
    "SegmentInfo",
    "SegmentSealed",
    "SegmentStoreError",
    "SegmentTruncated",
    "ServerError",
    "ServerFailure",
    "Table",
    "TableChanges",
    "TableConditionFailed",
    "TableEntry",
    "TableInfo",
    "TableKeyBadVersion",
    "TableKeyDoesNotExist",
    "TableKeyVersion",
    "TableNotEmpty",
    "Timeout",
    "TokenExpired",
    "WriterClosed",
    "WriterFenced",
    "WriterState",
    "WrongHost",
    "connect",
    "errors",
    "records",
    "writer_uuid",
]
