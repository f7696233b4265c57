# The state of one segment container, shared by its three stages: the operations (container.py),
# the commit loop (commit.py) and the storage writer with its checkpoints (storage_writer.py).
#
# Contract. ``ContainerState.__init__`` creates every field the stages use and nothing reads
# disk here. Fields are touched only on the event loop; worker threads get copies or objects
# they own for the duration of a call (the log writer, chunk store). The classes stack:
# ContainerState <- StorageWriter <- CommitLoop <- ContainerReads <- SegmentContainer, each
# adding one job.
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from . import records as R
from .api import (
    EVENT_COUNT,
    NULL_ATTRIBUTE_VALUE,
    SegmentNotFound,
    StorageUnavailable,
    StoreConfig,
)
from .chunks import ChunkId, ChunkStore
from .crc import crc32c, crc32c_extend
from .log_thread import LogThread
from .metadata import SegmentMeta
from .operations import Queued
from .pending import PendingBytes
from .read_cache import ReadCache
from .wal import WalWriter

log = logging.getLogger("segmentstore.storage")

_EC = EVENT_COUNT.int
_NULL = NULL_ATTRIBUTE_VALUE
_I64_MIN = -(2**63)
_I64_MAX = 2**63 - 1
_U32_MAX = 2**32 - 1
_MAX_DISK_READ = 8 * 1024 * 1024  # a read served from chunk files returns at most this much

CommitHook = Callable[[int, float], None]

# Bound once: the append path runs these for every record.
_APPEND_HEAD_PACK = R.APPEND_HEAD.pack
_CRC_PACK = R.CRC.pack
_crc = crc32c
_crc_extend = crc32c_extend
_WRITEV_MIN = 16 * 1024  # payloads this big go to the log by writev, not copied into a buffer


def _set_result(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class ContainerState:
    def __init__(
        self,
        index: int,
        directory: Path,
        config: StoreConfig,
        budget: int,
        pending: PendingBytes | None = None,
    ) -> None:
        self.index = index
        # Shared by all containers of a store: bytes accepted but not yet durable.
        self._pending_bytes = (
            pending if pending is not None else PendingBytes(config.max_pending_bytes)
        )
        self.dir = directory
        self.config = config
        self.label = f"container {index}"
        self._loop = asyncio.get_running_loop()
        self._log_thread = LogThread(self._loop, f"ss-log-{index}")
        self._io_exec = ThreadPoolExecutor(2, thread_name_prefix=f"ss-io-{index}")
        self._wal = WalWriter(
            directory / "log", config.fsync, config.fsync_interval_s, config.log_file_bytes
        )
        self._chunks = ChunkStore(directory / "chunks", config.chunk_file_bytes, config.direct_io)
        self._cache = ReadCache(budget)
        self._max_append = config.max_append_bytes
        self._max_unflushed = max(4 * config.flush_bytes, budget)
        self.on_commit: CommitHook | None = None

        self._segments: dict[str, SegmentMeta] = {}
        self._next_seq = 1
        self._committed_seq = 0
        self._next_segment_id = 1
        # Records not yet handed to the log thread: ``_parts`` (finished pieces, including big
        # payloads kept as the caller's bytes so they are never copied) then ``_buf``.
        self._parts: list[bytes | bytearray] = []
        self._buf = bytearray()
        self._batch_first_seq = 1
        self._ops: list[Queued] = []
        self._merged = 0  # bytes merged in the batch being applied (commit.py)
        self._wake: asyncio.Future[None] | None = None  # the writer task waits (commit.py)
        self._send_soon = False  # a _send_queued is scheduled (commit.py)
        # The batch on its way to the log thread: (its future, its operations) (commit.py).
        self._in_log: tuple[asyncio.Future[Any], list[Queued]] | None = None
        self._closing = False
        self._closed = False
        # Why the container stopped after an internal error (commit.py's header), or None.
        self._stopped: str | None = None

        # Storage writer and checkpoint state.
        self._dirty: set[SegmentMeta] = set()
        # Timer passes each small dirty segment has waited through (storage_writer.py).
        self._dirty_passes: dict[SegmentMeta, int] = {}
        self._flush_all = False  # set by _kick_flush: the next pass writes every dirty segment
        self._unflushed = 0
        self._dirty_chunks: set[ChunkId] = set()
        self._pending_deletes: list[tuple[int, int, int, int]] = []
        self._flush_lock = asyncio.Lock()
        self._flush_wake: asyncio.Future[None] | None = None
        self._log_index_at_commit = 0
        self._log_bytes_at_commit = 0
        self._log_bytes_at_ckpt = 0

        self.stats: dict[str, float] = {
            "appends": 0,
            "append_bytes": 0,
            "duplicates": 0,
            "batches": 0,
            "last_batch_records": 0,
            "last_fsync_seconds": 0.0,
            "failed_batches": 0,
            "stopped": 0,  # 1 once an internal error stopped the container (commit.py)
            "native_log_batches": 0,  # batches the native write lane made durable
            "flushes": 0,
            "flushed_bytes": 0,
            "checkpoints": 0,
            "last_checkpoint_seconds": 0.0,
            "recovered_records": 0,
            "recovered_log_bytes": 0,
        }
        self._tasks: list[asyncio.Task[None]] = []
        self._spare_job: asyncio.Future[None] | None = None

    def _committed(self, name: str) -> SegmentMeta:
        seg = self._segments.get(name)
        if seg is None or not seg.created or seg.deleted:
            raise SegmentNotFound(name)
        return seg

    @property
    def stopped_reason(self) -> str | None:
        """The one-line reason an internal error stopped this container, or None."""
        return self._stopped

    def _unavailable(self, name: str) -> StorageUnavailable:
        """The error of a call the container refuses: it is closing, or it stopped."""
        return StorageUnavailable(name, self._stopped or "the store is closing")

    def _wake_writer(self) -> None:
        wake = self._wake
        if wake is not None:
            self._wake = None
            if not wake.done():
                wake.set_result(None)

    def _kick_flush(self) -> None:
        self._flush_all = True
        wake = self._flush_wake
        if wake is not None and not wake.done():
            wake.set_result(None)
