"""The store-wide bound on bytes accepted but not yet durable (issue 14)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from segmentstore.storage import SegmentStore, StorageUnavailable, StoreOverloaded
from segmentstore.storage.store import container_of

from .conftest import small_config

LIMIT = 64 * 1024


def _two_containers() -> tuple[str, str]:
    names = [f"seg-{i}" for i in range(20)]
    a = names[0]
    b = next(n for n in names if container_of(n, 2) != container_of(a, 2))
    return a, b


async def test_bound_is_shared_by_all_containers_and_released_when_durable(
    tmp_path: Path,
) -> None:
    a, b = _two_containers()
    cfg = small_config(tmp_path, container_count=2, max_pending_bytes=LIMIT)
    async with await SegmentStore.open(cfg) as s:
        await s.create_segment(a)
        await s.create_segment(b)
        # Called back to back, nothing is durable yet: the bound counts both containers.
        futs = [s.append(a if i % 2 else b, bytes(10_000)) for i in range(10)]
        accepted = [f for f in futs if not f.done() or f.exception() is None]
        refused = [f for f in futs if f.done() and f.exception() is not None]
        assert len(accepted) == LIMIT // 10_000
        assert all(isinstance(f.exception(), StoreOverloaded) for f in refused)
        assert all(f.exception().retriable for f in refused)  # type: ignore[union-attr]
        assert s.pending_bytes == len(accepted) * 10_000
        assert s.stats()["pending_bytes"] == s.pending_bytes
        # Nothing refused was applied: lengths are those of the accepted appends.
        results = await asyncio.gather(*accepted)
        assert s.pending_bytes == 0
        total = s.info(a).length + s.info(b).length
        assert total == len(results) * 10_000
        # A caller that would rather wait: wait_for_room returns once there is room.
        more = [s.append(a, bytes(10_000)) for _ in range(LIMIT // 10_000)]
        await asyncio.wait_for(s.wait_for_room(), 10)
        assert s.pending_bytes < LIMIT
        await asyncio.gather(*more)
        # One payload above the whole limit still goes through when nothing else waits.
        await s.append(a, bytes(LIMIT + 1))
        assert s.pending_bytes == 0


async def test_failed_batches_give_their_bytes_back(tmp_path: Path) -> None:
    cfg = small_config(tmp_path, max_pending_bytes=LIMIT)
    async with await SegmentStore.open(cfg) as s:
        await s.create_segment("x")

        def fail(op: str) -> None:
            if op == "wal.write":
                raise OSError(28, "No space left on device")

        s.set_fault_hook(fail)
        futs = [s.append("x", bytes(10_000)) for _ in range(4)]
        for f in futs:
            with pytest.raises(StorageUnavailable):
                await f
        assert s.pending_bytes == 0
        s.set_fault_hook(None)
        await s.append("x", bytes(10_000))
        assert s.info("x").length == 10_000
