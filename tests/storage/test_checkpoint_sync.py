"""A checkpoint relies only on chunk bytes (and their checksums) that are on disk.

Issue 14 names the mutant: "the checkpoint skipping the chunk fsync" left the whole suite
green, because a copy of a live directory (our crash model) holds the page cache anyway. This
test watches the system calls instead: whenever a checkpoint file is renamed into place,
every chunk file whose bytes (data or block checksums) changed since the previous checkpoint
must have been fdatasynced since then.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from segmentstore.storage import SegmentStore

from .conftest import small_config


def _contents(chunk_dir: Path) -> dict[str, str]:
    if not chunk_dir.is_dir():
        return {}
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in chunk_dir.iterdir()
        if p.is_file() and not p.name.startswith(".")
    }


async def test_checkpoint_follows_the_fsync_of_every_chunk_it_relies_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chunk_dir = tmp_path / "container-0000" / "chunks"
    synced: set[str] = set()
    before: dict[str, str] = {}
    checkpoints: list[set[str]] = []
    real_fdatasync = os.fdatasync
    real_replace = os.replace

    def fdatasync(fd: int) -> None:
        real_fdatasync(fd)
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if path.parent == chunk_dir:
            synced.add(path.name)

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        nonlocal before
        if str(dst).endswith(".ckp"):
            now = _contents(chunk_dir)
            changed = {name for name, digest in now.items() if before.get(name) != digest}
            missing = changed - synced
            assert not missing, f"checkpoint written before fsync of {sorted(missing)}"
            checkpoints.append(changed)
            before = now
            synced.clear()
        real_replace(src, dst)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    monkeypatch.setattr(os, "replace", replace)
    cfg = small_config(tmp_path, checkpoint_log_bytes=48 * 1024)
    async with await SegmentStore.open(cfg) as s:
        for name in ("a", "b"):
            await s.create_segment(name)
        for i in range(120):
            await s.append("ab"[i % 2], bytes([i]) * (700 + 37 * i))
    # Several checkpoints relied on new chunk bytes (data and the checksums kept with it).
    relied = [c for c in checkpoints if c]
    assert len(relied) >= 2, checkpoints
