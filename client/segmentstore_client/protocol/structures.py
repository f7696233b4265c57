"""Value types nested inside commands: table keys and entries, iterator arguments,
conditional attribute updates and storage chunk descriptions."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Final

from .primitives import Buffer

NO_VERSION: Final = -(2**63)
"""TableKey version meaning "unconditional" (Long.MIN_VALUE)."""
NOT_EXISTS: Final = -1
"""TableKey version meaning "the key must not exist"; also the version of a missing key."""
NULL_ATTRIBUTE_VALUE: Final = -(2**63)
NULL_TABLE_SEGMENT_OFFSET: Final = -1


@dataclass(frozen=True, slots=True)
class TableKey:
    key: Buffer
    version: int = NO_VERSION


@dataclass(frozen=True, slots=True)
class TableEntry:
    key: Buffer
    value: Buffer
    version: int = NO_VERSION


@dataclass(frozen=True, slots=True)
class TableIteratorArgs:
    continuation_token: Buffer = b""
    prefix_filter: Buffer = b""
    from_key: Buffer = b""
    to_key: Buffer = b""


@dataclass(frozen=True, slots=True)
class ConditionalAttributeUpdate:
    """One attribute update carried by MergeSegments (33 bytes on the wire)."""

    attribute_id: uuid.UUID
    update_type: int  # 0 None, 1 Replace, 2 ReplaceIfGreater, 3 Accumulate, 4 ReplaceIfEquals
    new_value: int
    old_value: int = NULL_ATTRIBUTE_VALUE


@dataclass(frozen=True, slots=True)
class ChunkInfo:
    length_in_metadata: int
    length_in_storage: int
    start_offset: int
    chunk_name: str
    exists_in_storage: bool
