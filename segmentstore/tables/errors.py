# Errors of the table layer. Each one maps to exactly one wire reply (reference 10, 12.1);
# ``segmentstore/server/table_handlers.py`` does the mapping. They derive from the storage
# engine's StorageError so that one escaping a handler still gets an error reply (generic
# ErrorMessage) from the connection instead of closing it.
from __future__ import annotations

from ..storage import StorageError


class TableError(StorageError):
    """Base of every table-layer error; ``segment`` is the table segment's name."""


class IllegalTableArgument(TableError):
    """A malformed request: bad key/value size, bad version, bad range or token.

    Reply: ErrorMessage(code 0 = ILLEGAL_ARGUMENT).
    """


class NotATableSegment(IllegalTableArgument):
    """The segment exists but is not a table segment."""


class TableKeyNotFound(TableError):
    """A condition required a key to exist with some version, and it does not."""


class TableKeyVersionMismatch(TableError):
    """A key exists with another version, or exists although NOT_EXISTS was required."""


class TableNotEmpty(TableError):
    """DeleteTableSegment with mustBeEmpty on a table that has keys."""


class TableOperationUnsupported(TableError):
    """The operation does not exist for this kind of table (reply: OperationUnsupported)."""

    def __init__(self, segment: str, operation: str) -> None:
        super().__init__(segment, f"{operation} is not supported on this table")
        self.operation = operation


class TableOffsetMismatch(TableError):
    """The tableSegmentOffset condition failed: the table segment's length is ``current``."""

    def __init__(self, segment: str, expected: int, current: int) -> None:
        super().__init__(segment, f"table segment length is {current}, expected {expected}")
        self.expected = expected
        self.current = current
