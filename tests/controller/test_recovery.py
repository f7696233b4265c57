"""Crashes inside controller operations, in process on a real store: the operation stops
where a dying process would (an exception out of a store call), the store is closed and
reopened, and startup recovery finishes what was durable."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from segmentstore.controller.metadata import Metadata
from segmentstore.controller.model import StreamConfig
from segmentstore.controller.streams import Streams
from segmentstore.controller.transactions import Transactions
from segmentstore.storage import SegmentStore, StoreConfig
from segmentstore.tables import TableStore


class Crash(BaseException):
    """Stands for the process dying at that point."""


@asynccontextmanager
async def opened(path: Path) -> AsyncIterator[tuple[SegmentStore, Streams]]:
    store = await SegmentStore.open(StoreConfig(data_dir=path, direct_io=False))
    tables = await TableStore.open(store)
    md = await Metadata.open(tables)
    streams = Streams(store, md)
    await streams.recover()
    await Transactions(streams, md).recover()
    try:
        yield store, streams
    finally:
        await tables.close()
        await store.close()


def crash_on(store: SegmentStore, method: str, call: int) -> None:
    real = getattr(store, method)
    calls = 0

    async def wrapped(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == call:
            raise Crash(method)
        return await real(*args, **kwargs)

    setattr(store, method, wrapped)


async def test_crash_in_the_middle_of_a_delete_finishes_it(tmp_path: Path) -> None:
    async with opened(tmp_path) as (store, streams):
        await streams.create_scope("d")
        await streams.create_stream("d", "s", StreamConfig(min_segments=4))
        await streams.seal_stream("d", "s")
        crash_on(store, "delete", 3)
        with pytest.raises(Crash):
            await streams.delete_stream("d", "s")
        assert sum(store.exists(f"d/s/{i}.#epoch.0") for i in range(4)) == 2
    async with opened(tmp_path) as (store, streams):
        assert streams.get("d", "s") is None
        assert not any(store.exists(f"d/s/{i}.#epoch.0") for i in range(4))
        assert await streams.delete_scope("d") == "SUCCESS"


async def test_crash_in_the_middle_of_a_seal_finishes_it(tmp_path: Path) -> None:
    async with opened(tmp_path) as (store, streams):
        await streams.create_scope("d")
        await streams.create_stream("d", "s", StreamConfig(min_segments=3))
        crash_on(store, "seal", 2)
        with pytest.raises(Crash):
            await streams.seal_stream("d", "s")
    async with opened(tmp_path) as (store, streams):
        rec = streams.get("d", "s")
        assert rec is not None and rec.state == "sealed" and rec.pending is None
        assert all(store.info(f"d/s/{i}.#epoch.0").sealed for i in range(3))


async def test_a_stream_record_that_outlived_its_segments_gets_them_back(tmp_path: Path) -> None:
    async with opened(tmp_path) as (store, streams):
        await streams.create_scope("d")
        await streams.create_stream("d", "s", StreamConfig(min_segments=2))
        await store.delete("d/s/1.#epoch.0")  # as if its create never reached the disk
    async with opened(tmp_path) as (store, _streams):
        assert store.exists("d/s/1.#epoch.0")


async def test_crash_after_a_scale_created_some_segments_finishes_it(tmp_path: Path) -> None:
    async with opened(tmp_path) as (store, streams):
        await streams.create_scope("d")
        await streams.create_stream("d", "s", StreamConfig(min_segments=1))
        crash_on(store, "create_segment", 3)
        with pytest.raises(Crash):
            await streams.scale("d", "s", [0], [(0.0, 0.2), (0.2, 0.5), (0.5, 0.8), (0.8, 1.0)])
        rec = streams.get("d", "s")
        assert rec is not None and rec.pending is not None and len(rec.epochs) == 1
    async with opened(tmp_path) as (store, streams):
        rec = streams.get("d", "s")
        assert rec is not None and rec.pending is None
        assert [s >> 32 for s in rec.current.segments] == [1, 1, 1, 1]
        assert all(store.exists(rec.seg_name(s)) for s in rec.current.segments)
        assert store.info("d/s/0.#epoch.0").sealed
        assert rec.successors(0) == {s: [0] for s in rec.current.segments}
