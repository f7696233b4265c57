"""One set of apply rules: the state the live engine commits equals the state recovery
replays from the same log (operations.py; the two hot append loops inline its append rules).

A seeded random mix of every operation runs live; then a copy of the live directory (the
disk after a kill -9: everything comes from the log) and the closed directory (checkpoint)
are opened, and every segment's info (length, start offset, sealed, type, every attribute
including event counts and writers' event numbers) and bytes must equal the live ones.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from segmentstore.storage import (
    AttributeUpdate,
    AttributeUpdateType,
    SegmentInfo,
    SegmentStore,
    StorageError,
)

from .conftest import small_config

WRITERS = [uuid.UUID(int=0x100 + i) for i in range(3)]
ATTRS = [uuid.UUID(int=0x200 + i) for i in range(3)]


def _view(info: SegmentInfo) -> tuple[object, ...]:
    attrs = tuple(sorted((k.int, v) for k, v in info.attributes.items()))
    return (info.length, info.start_offset, info.sealed, info.segment_type, attrs)


async def _state(s: SegmentStore) -> dict[str, tuple[object, ...]]:
    out = {}
    for name in sorted(s.segment_names()):
        info = s.info(name)
        data = bytearray()
        while info.start_offset + len(data) < info.length:
            data += (await s.read(name, info.start_offset + len(data), 1 << 20)).data
        out[name] = (*_view(info), bytes(data))
    return out


async def _workload(s: SegmentStore, rng: random.Random) -> None:
    live: list[str] = []
    numbers: dict[tuple[str, uuid.UUID], int] = {}
    for i in range(400):
        roll = rng.random()
        try:
            if roll < 0.12 or not live:
                name = (
                    f"seg-{i}"
                    if rng.random() < 0.8
                    else f"{rng.choice(live or ['p'])}#transaction.{i}"
                )
                await s.create_segment(name, attributes={ATTRS[0]: i} if i % 3 else None)
                live.append(name)
            elif roll < 0.7:
                name = rng.choice(live)
                w = rng.choice([*WRITERS, None])
                payload = rng.randbytes(rng.choice([0, 5, 300, 5000, 20_000]))
                if w is None:
                    await s.append(name, payload, event_count=rng.randint(0, 3))
                else:
                    n = numbers.get((name, w), -1) + rng.choice([1, 1, 1, 0])  # 0: a duplicate
                    numbers[(name, w)] = max(n, numbers.get((name, w), -1))
                    await s.append(name, payload, writer_id=w, event_number=n)
            elif roll < 0.78:
                name = rng.choice(live)
                info = s.info(name)
                await s.truncate(name, rng.randint(info.start_offset, info.length))
            elif roll < 0.86:
                name = rng.choice(live)
                kind = rng.choice(list(AttributeUpdateType))
                update = AttributeUpdate(rng.choice(ATTRS), kind, rng.randint(-5, 50), i)
                await s.update_attributes(name, [update])
            elif roll < 0.9:
                await s.seal(rng.choice(live))
            elif roll < 0.97:
                txns = [n for n in live if "#transaction." in n]
                if txns:
                    source = rng.choice(txns)
                    await s.merge(source.split("#")[0], source)
                    live.remove(source)
            else:
                name = rng.choice(live)
                await s.delete(name)
                live.remove(name)
        except StorageError:
            pass  # sealed, bad attribute update, missing parent...: refused, nothing logged


@pytest.mark.parametrize("seed", [1, 2])
async def test_live_and_recovered_state_agree(
    tmp_path: Path, crash_copy: Callable[[Path], Path], seed: int
) -> None:
    cfg = small_config(tmp_path / "live", checkpoint_log_bytes=1 << 40)
    async with await SegmentStore.open(cfg) as s:
        await _workload(s, random.Random(seed))
        live = await _state(s)
        copy = crash_copy(cfg.data_dir)
    assert len(live) >= 5
    assert not list(copy.glob("container-*/checkpoint-*.ckp"))  # all from the log
    async with await SegmentStore.open(small_config(copy)) as s:
        assert await _state(s) == live
    async with await SegmentStore.open(small_config(cfg.data_dir)) as s:  # from the checkpoint
        assert await _state(s) == live
