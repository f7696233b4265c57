"""Fixtures for the table tests: a real storage engine and a TableStore on tmp_path."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from segmentstore.storage import SegmentStore, StoreConfig
from segmentstore.tables import TableStore


def table_config(data_dir: Path, **overrides: Any) -> StoreConfig:
    """Small log/chunk files so that flushing and checkpoints happen in small tests."""
    settings: dict[str, Any] = {
        "log_file_bytes": 1024 * 1024,
        "chunk_file_bytes": 256 * 1024,
        "checkpoint_log_bytes": 4 * 1024 * 1024,
        "flush_bytes": 512 * 1024,
        "flush_interval_s": 0.05,
    }
    settings.update(overrides)
    return StoreConfig(data_dir, **settings)


class Opened:
    """A SegmentStore plus its TableStore, reopenable on the same directory."""

    def __init__(self, data_dir: Path, **overrides: Any) -> None:
        self.data_dir = data_dir
        self.overrides = overrides
        self.store: SegmentStore | None = None
        self.tables: TableStore | None = None

    async def open(self, **table_args: Any) -> TableStore:
        self.store = await SegmentStore.open(table_config(self.data_dir, **self.overrides))
        self.tables = await TableStore.open(self.store, **table_args)
        return self.tables

    async def close(self) -> None:
        if self.tables is not None:
            await self.tables.close()
            self.tables = None
        if self.store is not None:
            await self.store.close()
            self.store = None

    async def reopen(self, **table_args: Any) -> TableStore:
        await self.close()
        return await self.open(**table_args)


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Opened]:
    e = Opened(tmp_path / "data")
    await e.open()
    try:
        yield e
    finally:
        await e.close()


@pytest.fixture
def tables(env: Opened) -> TableStore:
    assert env.tables is not None
    return env.tables


@pytest.fixture
def store(env: Opened) -> SegmentStore:
    assert env.store is not None
    return env.store


MakeTable = Callable[..., Awaitable[str]]


@pytest.fixture
def make_table(tables: TableStore) -> MakeTable:
    counter = [0]

    async def make(key_length: int = 0) -> str:
        counter[0] += 1
        name = f"sc/_tables/t{counter[0]}"
        await tables.create(name, key_length)
        return name

    return make
