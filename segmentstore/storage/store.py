# SegmentStore: the storage engine's front door. Routes each segment name to its container
# and aggregates what the server needs (stats, the commit hook).
#
# Contract. A name's container is ``crc32(routing name) % container_count`` where the routing
# name drops a Pravega transaction/transient suffix ("#transaction." / "#transient."), so a
# transaction and its parent share a container and can be merged; the hash is stable across
# processes (unlike ``hash()``). The container count is recorded in the data directory and a
# store opened with another count refuses to start (segments would land in the wrong place).
# All methods must be called from the event loop that ran ``open``. An open store holds an
# exclusive flock on ``data_dir/LOCK``.
from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
import time
import uuid
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from segmentstore_client.protocol.names import encode_name

from .api import (
    AppendResult,
    AttributeUpdate,
    DiskGuard,
    ReadResult,
    SegmentInfo,
    StorageError,
    StoreConfig,
)
from .container import SegmentContainer
from .container_state import CommitHook
from .crc import log_implementation
from .pending import PendingBytes
from .wal import FaultHook, fsync_dir

log = logging.getLogger("segmentstore.storage")

# SegmentContainer.append: (name, data, writer_id, event_number, event_count, expected_offset).
AppendFn = Callable[
    [str, bytes | bytearray | memoryview, uuid.UUID | None, int | None, int, int | None],
    asyncio.Future[AppendResult],
]

LAYOUT_FILE = "store.json"
_LAYOUT_VERSION = 1


def routing_name(name: str) -> str:
    """The part of a segment name that picks its container (the parent of a transaction)."""
    for marker in ("#transaction.", "#transient."):
        i = name.find(marker)
        if i >= 0:
            return name[:i]
    return name


def container_of(name: str, count: int) -> int:
    if count == 1:
        return 0
    return zlib.crc32(encode_name(routing_name(name))) % count


class SegmentStore:
    """Durable segments on local disk; see api.py for the rules every method keeps."""

    recovery_seconds: float

    def __init__(self, config: StoreConfig, containers: list[SegmentContainer]) -> None:
        self.config = config
        self._containers = containers
        self._count = len(containers)
        self._on_commit: CommitHook | None = None
        self.recovery_seconds = 0.0
        self._closed = False
        self._lock_fd = -1

    @classmethod
    async def open(cls, config: StoreConfig) -> SegmentStore:
        """Open (creating if needed) the store in ``config.data_dir`` and recover it."""
        log_implementation()
        loop = asyncio.get_running_loop()
        data_dir = Path(config.data_dir)
        lock_fd = await loop.run_in_executor(None, lock_data_dir, data_dir)
        try:
            await loop.run_in_executor(None, _check_layout, data_dir, config)
        except BaseException:
            os.close(lock_fd)
            raise
        t0 = time.perf_counter()
        budget = max(1, config.read_cache_bytes // config.container_count)
        pending = PendingBytes(config.max_pending_bytes)
        containers = [
            SegmentContainer(i, data_dir / f"container-{i:04d}", config, budget, pending)
            for i in range(config.container_count)
        ]
        started: list[SegmentContainer] = []
        try:
            # Every container's verdict first: a refused start changes no container.
            for c in containers:
                await c.preflight()
            for c in containers:
                await c.start()
                started.append(c)
        except BaseException:
            for c in started:
                await c.close()
            for c in containers:
                if c not in started:
                    c.abandon()
            os.close(lock_fd)
            raise
        store = cls(config, containers)
        store._lock_fd = lock_fd
        store.recovery_seconds = time.perf_counter() - t0
        log.info(
            "segment store open at %s: %d container(s), fsync=%s, recovery took %.3f s",
            data_dir,
            config.container_count,
            config.fsync,
            store.recovery_seconds,
        )
        return store

    async def close(self) -> None:
        """Finish queued operations, flush and checkpoint everything, stop background tasks."""
        if self._closed:
            return
        self._closed = True
        try:
            await asyncio.gather(*(c.close() for c in self._containers))
        finally:
            if self._lock_fd >= 0:
                os.close(self._lock_fd)  # releases the flock
                self._lock_fd = -1

    async def __aenter__(self) -> SegmentStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _route(self, name: str) -> SegmentContainer:
        if self._count == 1:
            return self._containers[0]
        return self._containers[container_of(name, self._count)]

    # ------------------------------------------------------------------ hooks

    @property
    def on_commit(self) -> CommitHook | None:
        """Called after each group commit with (records in the batch, fsync seconds)."""
        return self._on_commit

    @on_commit.setter
    def on_commit(self, hook: CommitHook | None) -> None:
        self._on_commit = hook
        for c in self._containers:
            c.on_commit = hook

    def set_fault_hook(self, hook: FaultHook | None) -> None:
        """Test hook: ``hook(op)`` runs before each log/chunk I/O; raising OSError fails it."""
        for c in self._containers:
            c.set_fault_hook(hook)

    # ------------------------------------------------------------------ queries

    def exists(self, name: str) -> bool:
        return self._route(name).exists(name)

    def info(self, name: str) -> SegmentInfo:
        return self._route(name).info(name)

    def segment_names(self) -> list[str]:
        names: list[str] = []
        for c in self._containers:
            names.extend(c.segment_names())
        return names

    def get_attribute(self, name: str, attribute_id: uuid.UUID) -> int:
        return self._route(name).get_attribute(name, attribute_id)

    # ------------------------------------------------------------------ operations

    async def create_segment(
        self,
        name: str,
        *,
        segment_type: int = 0,
        attributes: Mapping[uuid.UUID, int] | None = None,
    ) -> None:
        await self._route(name).create_segment(name, segment_type, attributes)

    def append(
        self,
        name: str,
        data: bytes | bytearray | memoryview,
        *,
        writer_id: uuid.UUID | None = None,
        event_number: int | None = None,
        event_count: int = 1,
        expected_offset: int | None = None,
    ) -> asyncio.Future[AppendResult]:
        """Order the append now; the future completes once it is durable (errors included)."""
        if self._count == 1:
            c = self._containers[0]
        else:
            c = self._containers[container_of(name, self._count)]
        return c.append(name, data, writer_id, event_number, event_count, expected_offset)

    def appender(self, name: str) -> AppendFn:
        """``append`` bound to ``name``'s container, positional: ``(name, data, writer_id,
        event_number, event_count, expected_offset)``. The server looks it up once per append
        session and calls it per append (no routing, no keyword arguments on the hot path)."""
        return self._route(name).append

    def try_read(self, name: str, offset: int, max_length: int) -> ReadResult | None:
        """``read`` if it can be served from memory right now, else None (never blocks)."""
        return self._route(name).try_read(name, offset, max_length)

    async def read(
        self,
        name: str,
        offset: int,
        max_length: int,
        *,
        wait: float | None = None,
        disk_guard: DiskGuard | None = None,
    ) -> ReadResult:
        """One whole read: from memory, from chunk files inside ``disk_guard``, or (with
        ``wait``) parked at the tail of an open segment; api.py states the outcomes."""
        return await self._route(name).read(name, offset, max_length, wait, disk_guard)

    async def wait_for_data(self, name: str, offset: int, timeout: float) -> None:
        await self._route(name).wait_for_data(name, offset, timeout)

    async def seal(self, name: str) -> int:
        return await self._route(name).seal(name)

    async def truncate(self, name: str, offset: int) -> None:
        await self._route(name).truncate(name, offset)

    async def delete(self, name: str) -> None:
        await self._route(name).delete(name)

    async def merge(self, target: str, source: str) -> int:
        c = self._route(target)
        if self._route(source) is not c:
            raise StorageError(source, f"is not in the same container as {target}")
        return await c.merge(target, source)

    async def update_attributes(self, name: str, updates: Sequence[AttributeUpdate]) -> None:
        await self._route(name).update_attributes(name, updates)

    @property
    def pending_bytes(self) -> int:
        """Payload bytes accepted and not yet durable, store-wide (bounded by
        ``StoreConfig.max_pending_bytes``; past it appends fail with StoreOverloaded)."""
        return self._containers[0]._pending_bytes.used

    async def wait_for_room(self) -> None:
        """Wait until the store-wide pending bytes are below their limit (callers that
        would rather wait than get StoreOverloaded call this before appending)."""
        await self._containers[0]._pending_bytes.wait_for_room()

    # ------------------------------------------------------------------ metrics

    def stopped(self) -> list[str]:
        """Why each container an internal error stopped stopped (commit.py's fail-stop):
        one line each, naming the container; empty while every container works."""
        return [c.stopped_reason for c in self._containers if c.stopped_reason is not None]

    def stats(self) -> dict[str, float]:
        """Counters and gauges summed over containers (names fit Prometheus metrics)."""
        out: dict[str, float] = {}
        for c in self._containers:
            for source in (c.stats, c.gauges()):
                for key, value in source.items():
                    if key.startswith("last_"):
                        out[key] = max(out.get(key, 0.0), value)
                    else:
                        out[key] = out.get(key, 0.0) + value
        out["pending_bytes"] = float(self.pending_bytes)
        out["recovery_seconds"] = self.recovery_seconds
        out["containers"] = float(self._count)
        return out


def lock_data_dir(data_dir: Path) -> int:
    """Hold an exclusive flock on ``data_dir/LOCK`` (two stores on one directory would
    corrupt it); the kernel drops it when the process dies, so a crash never leaves it held."""
    data_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(data_dir / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StorageError(str(data_dir), "is in use by another segment store") from None
    return fd


def _check_layout(data_dir: Path, config: StoreConfig) -> None:
    """Refuse a directory made with another container count or chunk file size: segments
    would be looked for in the wrong container, bytes at the wrong place in chunk files."""
    count = config.container_count
    path = data_dir / LAYOUT_FILE
    if path.exists():
        layout = json.loads(path.read_text())
        if layout.get("container_count") != count:
            raise StorageError(
                str(data_dir),
                f"created with {layout.get('container_count')} containers, opened with {count}",
            )
        recorded = layout.get("chunk_file_bytes", config.chunk_file_bytes)
        if recorded != config.chunk_file_bytes:
            raise StorageError(
                str(data_dir),
                f"created with {recorded}-byte chunk files, opened with {config.chunk_file_bytes}",
            )
        return
    tmp = path.with_suffix(".tmp")
    layout = {
        "version": _LAYOUT_VERSION,
        "container_count": count,
        "chunk_file_bytes": config.chunk_file_bytes,
    }
    with open(tmp, "w") as f:
        f.write(json.dumps(layout))
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)
    fsync_dir(data_dir)
