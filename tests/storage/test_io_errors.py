"""Disk full and I/O errors: the failing operation gets StorageUnavailable, nothing else breaks."""

from __future__ import annotations

import asyncio
import errno
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from segmentstore.storage import (
    EVENT_COUNT,
    SegmentNotFound,
    SegmentStore,
    StorageUnavailable,
)

from .conftest import small_config

W = uuid.UUID(int=42)


class Faults:
    """A fault hook that fails chosen operations while ``failing`` holds them."""

    def __init__(self) -> None:
        self.failing: set[str] = set()
        self.hits: dict[str, int] = {}

    def __call__(self, op: str) -> None:
        self.hits[op] = self.hits.get(op, 0) + 1
        if op in self.failing:
            raise OSError(errno.ENOSPC, "No space left on device (injected)")


@pytest.mark.parametrize("op", ["wal.write", "wal.fsync"])
async def test_log_failure_fails_the_batch_and_recovers(
    tmp_path: Path, crash_copy: Callable[[Path], Path], op: str
) -> None:
    cfg = small_config(tmp_path / "live")
    faults = Faults()
    async with await SegmentStore.open(cfg) as s:
        s.set_fault_hook(faults)
        await s.create_segment("seg")
        assert (await s.append("seg", b"good1", writer_id=W, event_number=1)).new_length == 5

        faults.failing.add(op)
        doomed = [s.append("seg", b"bad", writer_id=W, event_number=n) for n in (2, 3)]
        doomed_create = asyncio.ensure_future(s.create_segment("new"))
        for fut in doomed:
            with pytest.raises(StorageUnavailable) as err:
                await fut
            assert err.value.retriable
        with pytest.raises(StorageUnavailable):
            await doomed_create
        # Nothing of the failed batch is visible: not its data, not its writer state.
        info = s.info("seg")
        assert info.length == 5
        assert s.get_attribute("seg", W) == 1
        assert s.get_attribute("seg", EVENT_COUNT) == 1
        assert not s.exists("new")

        faults.failing.clear()  # space is back
        # The resend of event 2 is new data, not a duplicate, and lands right after good1.
        r = await s.append("seg", b"good2", writer_id=W, event_number=2, expected_offset=5)
        assert r.new_length == 10 and not r.duplicate
        await s.create_segment("new")
        assert bytes((await s.read("seg", 0, 100)).data) == b"good1good2"
        copy = crash_copy(cfg.data_dir)
    # After a crash the log holds exactly the acknowledged records, none of the failed ones.
    async with await SegmentStore.open(small_config(copy)) as s:
        assert bytes((await s.read("seg", 0, 100)).data) == b"good1good2"
        assert s.get_attribute("seg", W) == 2
        assert s.exists("new")


async def test_failure_rolls_back_a_pending_delete_and_seal(tmp_path: Path) -> None:
    faults = Faults()
    async with await SegmentStore.open(small_config(tmp_path)) as s:
        s.set_fault_hook(faults)
        await s.create_segment("a")
        await s.create_segment("b")
        faults.failing.add("wal.write")
        with pytest.raises(StorageUnavailable):
            await s.delete("a")
        with pytest.raises(StorageUnavailable):
            await s.seal("b")
        faults.failing.clear()
        assert s.exists("a") and not s.info("b").sealed
        assert (await s.append("a", b"x")).new_length == 1
        assert (await s.append("b", b"y")).new_length == 1
        await s.delete("a")
        with pytest.raises(SegmentNotFound):
            s.info("a")


async def test_chunk_write_failure_bounds_memory_and_recovers(tmp_path: Path) -> None:
    faults = Faults()
    # flush_bytes=1024 -> at most 4 KiB of committed data may wait in memory for chunk files.
    cfg = small_config(tmp_path, flush_bytes=1024, read_cache_bytes=2048)
    async with await SegmentStore.open(cfg) as s:
        s.set_fault_hook(faults)
        await s.create_segment("seg")
        faults.failing.add("chunk.write")
        stored = bytearray()
        refused = 0
        for i in range(20):
            piece = bytes([i]) * 500
            try:
                await s.append("seg", piece)
                stored += piece
            except StorageUnavailable:
                refused += 1
            assert s.stats()["unflushed_bytes"] <= 4096 + 500
        assert faults.hits.get("chunk.write", 0) > 0
        assert refused > 0 and len(stored) >= 4096  # the limit, not the first error, refuses
        faults.failing.clear()  # space is back
        await s.append("seg", b"after")
        stored += b"after"
        for _ in range(250):
            if s.stats()["unflushed_bytes"] == 0:
                break
            await asyncio.sleep(0.02)
        assert s.stats()["unflushed_bytes"] == 0
        got = bytearray()
        while len(got) < len(stored):
            got += (await s.read("seg", len(got), 100_000)).data
        assert got == stored
    async with await SegmentStore.open(cfg) as s:
        assert s.info("seg").length == len(stored)


async def test_checkpoint_failure_keeps_the_log(tmp_path: Path) -> None:
    faults = Faults()
    cfg = small_config(tmp_path)
    s = await SegmentStore.open(cfg)
    s.set_fault_hook(faults)
    await s.create_segment("seg")
    await s.append("seg", b"kept")
    faults.failing.add("checkpoint.write")
    await s.close()  # the final checkpoint fails; the log still holds everything
    assert not list((tmp_path / "container-0000").glob("checkpoint-*.ckp"))
    async with await SegmentStore.open(cfg) as s:
        assert bytes((await s.read("seg", 0, 10)).data) == b"kept"


async def test_chunk_read_failure_is_storage_unavailable(tmp_path: Path) -> None:
    """A read that needs a chunk file and cannot get it fails with the retriable
    StorageUnavailable (the server turns it into an error reply), not with a raw OSError
    that would leave a reader waiting; once the disk answers again the read works."""
    faults = Faults()
    cfg = small_config(tmp_path, read_cache_bytes=8 * 1024, flush_bytes=4 * 1024)
    async with await SegmentStore.open(cfg) as s:
        s.set_fault_hook(faults)
        await s.create_segment("seg")
        data = bytes(range(256)) * 200  # 51,200 bytes, far over the read cache
        for i in range(0, len(data), 5120):
            await s.append("seg", data[i : i + 5120])
        for _ in range(200):  # until the start is only in chunk files
            if s.try_read("seg", 0, 100) is None:
                break
            await asyncio.sleep(0.02)
        assert s.try_read("seg", 0, 100) is None
        faults.failing.add("chunk.read")
        with pytest.raises(StorageUnavailable) as err:
            await s.read("seg", 0, 1000)
        assert err.value.retriable
        faults.failing.clear()
        r = await s.read("seg", 0, 1000)
        assert bytes(r.data) == data[:1000]
