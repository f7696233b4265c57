"""Table segments: versioned key-value tables stored as segments of the storage engine.

``TableStore`` is the entry point (``await TableStore.open(store)``); its errors map one to
one onto the wire protocol's table replies (see ``segmentstore/server/table_handlers.py``).
"""

from .errors import (
    IllegalTableArgument,
    NotATableSegment,
    TableError,
    TableKeyNotFound,
    TableKeyVersionMismatch,
    TableNotEmpty,
    TableOffsetMismatch,
    TableOperationUnsupported,
)
from .index import NOT_EXISTS
from .scans import MAX_FIXED_KEY_LENGTH, DeltaRead
from .table_store import (
    NO_OFFSET,
    NO_VERSION,
    TableCorrupted,
    TableInfo,
    TableStore,
)

__all__ = [
    "MAX_FIXED_KEY_LENGTH",
    "NOT_EXISTS",
    "NO_OFFSET",
    "NO_VERSION",
    "DeltaRead",
    "IllegalTableArgument",
    "NotATableSegment",
    "TableCorrupted",
    "TableError",
    "TableInfo",
    "TableKeyNotFound",
    "TableKeyVersionMismatch",
    "TableNotEmpty",
    "TableOffsetMismatch",
    "TableOperationUnsupported",
    "TableStore",
]
