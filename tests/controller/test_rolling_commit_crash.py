"""A crash at every durable step of a rolling commit (issue 16, trust): a transaction with
two parents opened before a scale to three segments commits through copies of its epoch
(scale forward, merges, scale back). The process "dies" before the n-th store or metadata
write, for every n: what is on disk then (a copy of the data directory) is opened, startup
recovery runs, and every event, of the stream and of the transaction, is there exactly
once (or, when the crash came before COMMITTING was durable, none of the transaction's,
and its commit retried then adds them once), the transaction is COMMITTED and the stream has its epoch-1 key ranges again, with
nothing pending. In process on a real store; ``SEGMENTSTORE_CRASH_SWEEP=all`` tries every
step (about 20 s; by default two of them, in the scale forward and in the scale back)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from segmentstore.controller.model import TXN_COMMITTED, TXN_OPEN, StreamConfig
from segmentstore.controller.streams import Streams
from segmentstore.storage import SegmentStore

from .conftest import open_in_process

THIRDS = [(0.0, 1 / 3), (1 / 3, 2 / 3), (2 / 3, 1.0)]
STEPS = ("create_segment", "seal", "merge", "delete")


class Crash(BaseException):
    """Stands for the process dying at that point."""


async def _events(store: SegmentStore, streams: Streams) -> list[bytes]:
    rec = streams.get("c", "s")
    assert rec is not None
    out: list[bytes] = []
    for sid in rec.segments:
        data = (
            bytes((await store.read(rec.seg_name(sid), 0, 1 << 20)).data)
            if store.exists(rec.seg_name(sid))
            else b""
        )
        out.extend(e for e in data.split(b";") if e)
    return out


async def _run(base: Path, crash_at: int) -> int:
    """Commit with a crash before store/metadata step ``crash_at`` (0: none); check the
    reopened copy. Returns how many steps the commit took."""
    live = base / f"live-{crash_at}"
    store, tables, streams, txns = await open_in_process(live)
    await streams.create_scope("c")
    await streams.create_stream("c", "s", StreamConfig(min_segments=2))
    txn, rec = await txns.create("c", "s", 60_000)
    for i, sid in enumerate(txn.segments):
        await store.append(rec.seg_name(sid), f"s{i};".encode())
        await store.append(rec.seg_name(sid) + txn.suffix, f"t{i}a;t{i}b;".encode())
    assert (await streams.scale("c", "s", list(rec.current.segments), THIRDS))[0] == "STARTED"
    steps = 0
    copy = base / f"crash-{crash_at}"

    def step() -> None:
        nonlocal steps
        steps += 1
        if steps == crash_at:
            shutil.copytree(live, copy)  # what the disk holds as the process dies
            raise Crash(f"step {steps}")

    def wrap(target: Any, name: str) -> None:
        real = getattr(target, name)

        async def wrapped(*args: Any, **kwargs: Any) -> Any:
            step()
            return await real(*args, **kwargs)

        setattr(target, name, wrapped)

    for name in STEPS:
        wrap(store, name)
    wrap(streams.md, "_put")
    wrap(streams.md, "_remove")
    try:
        assert await txns.commit(txn) == "SUCCESS"
        assert crash_at == 0 or crash_at > steps
        copy = live
    except Crash:
        pass
    finally:
        for name in STEPS:
            store.__dict__.pop(name, None)
        await tables.close()
        await store.close()
    store, tables, streams, txns = await open_in_process(copy)
    try:
        if streams.md.txns[txn.key].state == TXN_OPEN:  # died before COMMITTING was durable
            assert sorted(await _events(store, streams)) == [b"s0", b"s1"]  # none of it
            assert await txns.commit(streams.md.txns[txn.key]) == "SUCCESS"  # the retry
        got = await _events(store, streams)
        want = [b"s0", b"s1", b"t0a", b"t0b", b"t1a", b"t1b"]
        assert sorted(got) == want, (crash_at, got)  # all of it, once
        assert streams.md.txns[txn.key].state == TXN_COMMITTED
        rec = streams.get("c", "s")
        assert rec is not None and rec.pending is None
        ranges = [rec.segments[s].key_range for s in rec.current.segments]
        assert ranges == THIRDS, ranges
        for sid in rec.current.segments:
            assert store.exists(rec.seg_name(sid)) and not store.info(rec.seg_name(sid)).sealed
        assert not any("#transaction." in n for n in store.segment_names() if n.startswith("c/"))
    finally:
        await tables.close()
        await store.close()
    shutil.rmtree(base / f"live-{crash_at}", ignore_errors=True)
    shutil.rmtree(base / f"crash-{crash_at}", ignore_errors=True)
    return steps


async def test_a_crash_at_any_step_of_a_rolling_commit_commits_exactly_once(
    tmp_path: Path,
) -> None:
    total = await _run(tmp_path, 0)
    assert total >= 10  # roll forward, merges, roll back: many durable steps
    if os.environ.get("SEGMENTSTORE_CRASH_SWEEP") == "all":  # ~1 s per step, 21 steps
        points = list(range(1, total + 1))
    else:  # inside the scale forward and between the merges / in the scale back
        points = [total // 3, 2 * total // 3]
    for crash_at in points:
        await _run(tmp_path, crash_at)
