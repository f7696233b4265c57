"""The storage engine's public contract: what the server and table layers may rely on.

Everything above the storage layer (the wire server, table segments, benchmarks) talks to
a :class:`SegmentStore` through exactly these names. The engine itself lives in the
sibling modules; this module holds only the value types, the errors and the constants.

Ordering and durability rules every implementation keeps:

* ``append`` is *validated and ordered when it is called* (synchronously, in call order per
  segment), and returns a future that completes once the record is durable under the
  configured fsync mode. Calls made from one task in order land in the segment in order.
* Readers only see data whose record is durable (committed). ``info().length`` is the
  committed length; conditional-append checks use the pending length (everything accepted,
  durable or not), so a pipelined writer can chain ``expected_offset`` values.
* A duplicate append (writer id given and ``event_number`` <= the writer's last accepted
  event number) stores nothing; its future completes no earlier than the append that stored
  that event number did.

How :class:`~segmentstore.storage.SegmentStore` (store.py) implements the calls:

* ``append(...)`` is a plain method returning an ``asyncio.Future[AppendResult]``; every
  error (SegmentNotFound, SegmentSealed, BadOffset, AppendTooLarge, StorageUnavailable...)
  arrives through that future, never raised. ``writer_id`` without ``event_number`` appends
  without deduplication. InvalidOffset refuses an event number or count out of range, an
  event count that would take EVENT_COUNT past 2**63 - 1 (merge too), and EVENT_COUNT's own
  id as a writer id (with an event number). Payloads of 16 KiB or more are kept by reference until written
  (pass ``bytes`` you will not mutate; a ``bytearray``/``memoryview`` is copied).
* ``async read(name, offset, max_length, *, wait=None, disk_guard=None)`` owns one whole
  read. It returns at once (no suspension, guard not called) when the bytes are in the read
  cache, and reads chunk files in a worker thread otherwise, entering ``disk_guard(n)`` (an
  async context manager; ``n`` = the most bytes the result can carry) exactly once around
  that: the server takes the connection's output reservation and a store-wide disk slot
  there. Without ``wait`` an offset past the committed length raises InvalidOffset. With
  ``wait`` (seconds, a tail read) a read at or past the committed end of an open segment
  parks until data lands after ``offset`` and returns it; it returns an empty ``at_tail``
  result when ``wait`` runs out, the segment is deleted or the store closes, an empty
  ``end_of_segment`` result when the segment is sealed exactly at ``offset``, and raises
  InvalidOffset when it is sealed below ``offset`` (as it does at once for a sealed segment),
  StorageUnavailable when its container stopped after an internal error.
  ``try_read(...)`` is the synchronous fast path: the same result when served from memory,
  ``None`` when a chunk file is needed (then call ``read``). Both raise SegmentNotFound /
  SegmentTruncated / SegmentDamaged directly. A read served from chunk files may return
  fewer bytes than asked (at most 8 MiB) but never none unless it is at the end;
  ``at_tail`` / ``end_of_segment`` are set whenever the returned data ends at the committed
  length of an unsealed / sealed segment. ``wait_for_data(name, offset, timeout)`` only
  parks (for callers that read later, e.g. the relay).
* ``merge`` seals the source (its own log record: a crash between the two leaves the source
  sealed and unmerged; merging again completes it) and then copies the source's readable
  bytes into ONE log record that appends them to the target and deletes the source, so the
  merge itself is atomic. Target and source must live in the same container: a Pravega
  transaction/transient segment (``parent#transaction.*`` / ``parent#transient.*``) always
  lands in its parent's container.
* ``on_commit`` (property): called after each group commit with (records in the batch,
  seconds the log fsync took). ``stats()`` returns counters and gauges for Prometheus.
* ``set_fault_hook(fn)``: tests only; ``fn(op)`` runs before each log / chunk / checkpoint
  I/O ("wal.write", "wal.fsync", "wal.open", "chunk.write", "chunk.fsync",
  "checkpoint.write") and an OSError it raises is treated as that I/O failing.
* ``update_attributes`` on a sealed segment raises SegmentSealed (as Pravega does); setting
  an attribute to NULL_ATTRIBUTE_VALUE removes it.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

NULL_ATTRIBUTE_VALUE = -(2**63)
"""Pravega's "no value" marker for attributes and writer event numbers (Long.MIN_VALUE)."""

CORE_ATTRIBUTE_MSB = 0x8000000000000000


def core_attribute(lsb: int) -> uuid.UUID:
    """The id of Pravega core attribute number ``lsb`` (msb 0x8000000000000000)."""
    return uuid.UUID(int=(CORE_ATTRIBUTE_MSB << 64) | lsb)


CREATION_TIME = core_attribute(0)
EVENT_COUNT = core_attribute(1)
SCALE_POLICY_TYPE = core_attribute(2)
SCALE_POLICY_RATE = core_attribute(3)
ROLLOVER_SIZE = core_attribute(4)
ATTRIBUTE_SEGMENT_TYPE = core_attribute(9)

# Segment type flags (the value of ATTRIBUTE_SEGMENT_TYPE).
SEGMENT_TYPE_STREAM = 0x00
SEGMENT_TYPE_TABLE = 0x01
SEGMENT_TYPE_FIXED_KEY_TABLE = 0x04 | 0x01
SEGMENT_TYPE_TRANSIENT = 0x80

FsyncMode = Literal["always", "interval", "never"]

DiskGuard = Callable[[int], AbstractAsyncContextManager[object]]
"""What ``SegmentStore.read`` enters around a chunk-file read, given the most bytes the
result can carry (the server: output reservation + a store-wide disk-read slot)."""


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """Settings of a :class:`SegmentStore`; every field has a safe default."""

    data_dir: Path
    fsync: FsyncMode = "always"
    fsync_interval_s: float = 0.1
    container_count: int = 1
    read_cache_bytes: int = 256 * 1024 * 1024
    # A log file is rolled (and an old one becomes eligible for deletion after a
    # checkpoint) once it reaches this size.
    log_file_bytes: int = 64 * 1024 * 1024
    # Largest payload of one append (the wire's frame limit bounds it anyway).
    max_append_bytes: int = 16 * 1024 * 1024
    # Segment data moves from the log to chunk files of this size (fixed boundaries:
    # chunk k holds offsets [k * chunk_file_bytes, (k + 1) * chunk_file_bytes)).
    chunk_file_bytes: int = 64 * 1024 * 1024
    # A metadata checkpoint (after which old log files are deleted) is taken once this many
    # log bytes were written since the last one; it bounds how much log recovery replays.
    checkpoint_log_bytes: int = 128 * 1024 * 1024
    # The storage writer copies committed data to chunk files once this much is waiting,
    # or every flush_interval_s, whichever comes first.
    flush_bytes: int = 16 * 1024 * 1024
    flush_interval_s: float = 1.0
    # A timer flush (one every flush_interval_s) writes a segment only once it has
    # segment_flush_bytes waiting, or at every flush_small_every-th pass it is seen dirty:
    # many slow segments then cost one chunk write each per ~10 s, not per second (each
    # write rewrites the segment's last partial block). The store-wide bounds above, a
    # checkpoint and close still flush every dirty segment. (Pravega's storage writer
    # likewise flushes a segment at a size threshold or after a time, 30 s by default.)
    segment_flush_bytes: int = 1024 * 1024
    flush_small_every: int = 10
    # Store-wide bound on payload bytes accepted but not yet durable (pending.py): an append
    # or merge past it fails at once with the retriable StoreOverloaded.
    max_pending_bytes: int = 256 * 1024 * 1024
    # Write and read chunk files with O_DIRECT where the filesystem supports it (chunks.py):
    # segment data then bypasses the page cache, which the read cache stands in for.
    direct_io: bool = True


class AttributeUpdateType(enum.IntEnum):
    """How an attribute update combines with the current value (wire codes of Pravega)."""

    NONE = 0  # set only if absent
    REPLACE = 1
    REPLACE_IF_GREATER = 2
    ACCUMULATE = 3
    REPLACE_IF_EQUALS = 4  # compare-and-set against ``compare_value``


@dataclass(frozen=True, slots=True)
class AttributeUpdate:
    attribute_id: uuid.UUID
    update_type: AttributeUpdateType
    value: int
    compare_value: int = NULL_ATTRIBUTE_VALUE


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    name: str
    length: int  # committed (durable) length = Pravega's writeOffset
    start_offset: int
    sealed: bool
    deleted: bool
    last_modified_ms: int
    segment_type: int
    attributes: dict[uuid.UUID, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AppendResult:
    new_length: int  # segment length right after this append (or current length if duplicate)
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class ReadResult:
    offset: int
    data: bytes | memoryview
    at_tail: bool  # stopped at the committed end of an unsealed segment
    end_of_segment: bool  # stopped at the end of a sealed segment


class StorageError(Exception):
    """Base of every error the storage engine raises."""

    retriable = False

    def __init__(self, segment: str, message: str = "") -> None:
        super().__init__(f"{segment}: {message}" if message else segment)
        self.segment = segment


class SegmentNotFound(StorageError):
    pass


class SegmentExists(StorageError):
    pass


class SegmentSealed(StorageError):
    pass


class SegmentTruncated(StorageError):
    """The requested offset lies below the segment's start offset."""

    def __init__(self, segment: str, start_offset: int, offset: int) -> None:
        super().__init__(segment, f"offset {offset} is below start offset {start_offset}")
        self.start_offset = start_offset
        self.offset = offset


class BadOffset(StorageError):
    """A conditional append's expected offset did not match the segment's length."""

    def __init__(self, segment: str, expected: int, actual: int) -> None:
        super().__init__(segment, f"expected offset {expected}, segment length is {actual}")
        self.expected = expected
        self.actual = actual


class InvalidOffset(StorageError):
    """An offset outside what the operation allows (e.g. truncating past the end)."""


class BadAttributeUpdate(StorageError):
    """A compare-and-set attribute update found another current value."""


class StorageUnavailable(StorageError):
    """Disk full or an I/O error: nothing was applied; a retry later may succeed.

    Also every call to a container that an internal error stopped (the message says so):
    then an operation that was not acknowledged may still be in the log, and is back after a
    restart, which the retry needs (an append with a writer id and event number is then
    found a duplicate, not stored twice)."""

    retriable = True


class StoreOverloaded(StorageUnavailable):
    """``StoreConfig.max_pending_bytes`` of appends are accepted and not yet durable, across
    the whole store: nothing was applied; retry once earlier appends complete (or
    ``await SegmentStore.wait_for_room()`` first)."""


class AppendTooLarge(StorageError):
    """An append's payload exceeds ``StoreConfig.max_append_bytes``."""


class SegmentDamaged(StorageError):
    """The segment's data at rest is damaged: a chunk file is missing, short or fails its
    checksum. Its reads (and appends) fail with this until the file is restored from a
    backup or the segment is deleted; other segments are unaffected. Not retriable."""


class StoreCorrupted(StorageError):
    """Opening found damage that recovery must not paper over (e.g. a bad checkpoint).

    ``segment`` holds the path of the damaged file; the message names the command that
    repairs it. A torn log *tail* (an incomplete last write) is not this error: recovery
    cuts it and logs what it cut.
    """
