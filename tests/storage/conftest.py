"""Shared fixtures for the storage engine tests: a store in a temporary directory."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from segmentstore.storage import SegmentStore, StoreConfig


def small_config(data_dir: Path, **overrides: Any) -> StoreConfig:
    """A config with tiny files so rolling, flushing and checkpoints happen in small tests."""
    settings: dict[str, Any] = {
        "log_file_bytes": 64 * 1024,
        "chunk_file_bytes": 16 * 1024,
        "checkpoint_log_bytes": 256 * 1024,
        "flush_bytes": 32 * 1024,
        "flush_interval_s": 0.05,
    }
    settings.update(overrides)
    return StoreConfig(data_dir, **settings)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SegmentStore]:
    s = await SegmentStore.open(small_config(tmp_path / "data"))
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
def crash_copy(tmp_path: Path) -> Callable[[Path], Path]:
    """Copy a live store's directory: the copy is what the disk holds if we crashed now."""
    counter = [0]

    def copy(data_dir: Path) -> Path:
        counter[0] += 1
        target = tmp_path / f"crash-{counter[0]}"
        shutil.copytree(data_dir, target)
        return target

    return copy
