"""Issue 19: in fsync mode "always" a small batch is written and fdatasynced on the event
loop's thread (no hand-off to the log thread and back); a big batch, or any batch in mode
"interval", still goes to the log thread. Either way the fdatasync happens before the ack."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from segmentstore.storage import SegmentStore, commit

from .conftest import small_config


class Where:
    """A fault hook that records the thread of each log I/O and whether the append's
    future was already done when the fdatasync started."""

    def __init__(self) -> None:
        self.threads: dict[str, set[int]] = {}
        self.watch: asyncio.Future[object] | None = None
        self.acked_before_sync = False

    def __call__(self, op: str) -> None:
        self.threads.setdefault(op, set()).add(threading.get_ident())
        if op == "wal.fsync" and self.watch is not None and self.watch.done():
            self.acked_before_sync = True


@pytest.mark.parametrize(
    ("size", "limit", "on_loop"),
    [(100, commit.INLINE_LOG_BYTES, True), (64 * 1024, commit.INLINE_LOG_BYTES, False),
     (100, 0, False)],  # fmt: skip
)
async def test_small_batches_sync_on_the_loop_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int, limit: int, on_loop: bool
) -> None:
    monkeypatch.setattr(commit, "INLINE_LOG_BYTES", limit)
    where = Where()
    async with await SegmentStore.open(small_config(tmp_path, log_file_bytes=1 << 20)) as s:
        await s.create_segment("seg")
        s.set_fault_hook(where)
        where.watch = fut = asyncio.ensure_future(s.append("seg", b"x" * size))
        assert (await fut).new_length == size
        assert not where.acked_before_sync
        loop_thread = threading.get_ident()
        assert where.threads["wal.fsync"] == where.threads["wal.write"]
        assert (where.threads["wal.fsync"] == {loop_thread}) is on_loop


async def test_interval_mode_keeps_the_log_thread(tmp_path: Path) -> None:
    where = Where()
    async with await SegmentStore.open(small_config(tmp_path, fsync="interval")) as s:
        await s.create_segment("seg")
        s.set_fault_hook(where)
        await s.append("seg", b"x" * 100)
        assert threading.get_ident() not in where.threads["wal.write"]
