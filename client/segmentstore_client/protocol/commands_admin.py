"""Wire commands of one family: the admin gateway (reference 6.8).

Declared with ``@wire`` (commands_base.py); import them from ``segmentstore_client.protocol``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .commands_base import Command, Reply, wire
from .structures import (
    ChunkInfo,
)

# --- 6.8 admin gateway ------------------------------------------------------------------


@wire(-3, "FLUSH_TO_STORAGE", "request", "i32 str i64")
@dataclass(frozen=True, slots=True)
class FlushToStorage(Command):
    container_id: int
    delegation_token: str
    request_id: int


@wire(-4, "FLUSHED_TO_STORAGE", "reply", "i64")
@dataclass(frozen=True, slots=True)
class StorageFlushed(Reply):
    request_id: int


@wire(-5, "LIST_STORAGE_CHUNKS", "request", "str str i64")
@dataclass(frozen=True, slots=True)
class ListStorageChunks(Command):
    segment: str
    delegation_token: str
    request_id: int


@wire(-6, "STORAGE_CHUNKS_LISTED", "reply", "i64 chunks")
@dataclass(frozen=True, slots=True)
class StorageChunksListed(Reply):
    request_id: int
    chunks: tuple[ChunkInfo, ...]
