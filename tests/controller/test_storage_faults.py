"""The controller on a store that cannot write (issue 16, trust): disk full or a failing
fdatasync, in process on a real store. A failed log write or fdatasync is injected with
the store's fault hook (the path a full disk takes: ``tests/storage/test_io_errors.py``);
a failure in the middle of an operation, after its pending record is durable, by making
one store call raise ``StorageUnavailable`` as the store does. Each call must fail with
StorageUnavailable (the gRPC layer's UNAVAILABLE), change nothing it did not make
durable, be finished by a retry or the background duty once the store writes again, and
reopen consistent."""

from __future__ import annotations

import errno
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from segmentstore.controller.autoscale import AutoScaler
from segmentstore.controller.groups import Groups
from segmentstore.controller.model import TXN_COMMITTED, TXN_COMMITTING, TXN_OPEN, StreamConfig
from segmentstore.controller.retention import Retention
from segmentstore.controller.streams import Streams
from segmentstore.controller.transactions import Transactions
from segmentstore.storage import SegmentStore, StorageUnavailable
from segmentstore.tables import TableStore

from .conftest import open_in_process


class Faults:
    """Fault hook: the chosen store operations fail as a full disk or EIO makes them."""

    def __init__(self) -> None:
        self.failing: set[str] = set()
        self.code = errno.ENOSPC

    def __call__(self, op: str) -> None:
        if op in self.failing:
            raise OSError(self.code, f"{errno.errorcode[self.code]} (injected)")


@dataclass
class Ctl:
    store: SegmentStore
    tables: TableStore
    streams: Streams
    txns: Transactions
    faults: Faults

    def fail_method(self, method: str) -> None:
        """Make ``store.<method>`` raise StorageUnavailable until ``heal``."""

        async def failing(*args: Any, **kwargs: Any) -> Any:
            raise StorageUnavailable(str(args[0]), "no space left on device (injected)")

        setattr(self.store, method, failing)

    def heal(self) -> None:
        self.faults.failing.clear()
        for method in ("create_segment", "seal", "delete", "merge", "truncate"):
            self.store.__dict__.pop(method, None)


@asynccontextmanager
async def opened(path: Path) -> AsyncIterator[Ctl]:
    store, tables, streams, txns = await open_in_process(path)
    faults = Faults()
    store.set_fault_hook(faults)
    try:
        yield Ctl(store, tables, streams, txns, faults)
    finally:
        store.set_fault_hook(None)
        await tables.close()
        await store.close()


def segments_of(c: Ctl, scope: str, stream: str) -> dict[int, tuple[bool, bool]]:
    """Every segment of the stream's record: (exists, sealed)."""
    rec = c.streams.get(scope, stream)
    assert rec is not None
    out = {}
    for sid in rec.segments:
        name = rec.seg_name(sid)
        exists = c.store.exists(name)
        out[sid] = (exists, exists and c.store.info(name).sealed)
    return out


def assert_consistent(c: Ctl) -> None:
    """No half-made metadata: every current segment of an active stream exists unsealed,
    every segment of a sealed stream is sealed, nothing is left pending."""
    for rec in c.streams.md.streams.values():
        assert rec.pending is None, rec
        for sid in rec.current.segments:
            name = rec.seg_name(sid)
            assert c.store.exists(name), name
            assert c.store.info(name).sealed == (rec.state == "sealed"), name
    for txn in c.streams.md.txns.values():
        assert txn.state not in (TXN_COMMITTING,), txn


@pytest.mark.parametrize("op", ["wal.write", "wal.fsync"])
async def test_every_call_fails_cleanly_then_works_once_the_disk_writes(
    tmp_path: Path, op: str
) -> None:
    async with opened(tmp_path) as c:
        s = c.streams
        groups = Groups(s, c.tables)
        assert await s.create_scope("a") == "SUCCESS"
        assert await s.create_scope("e") == "SUCCESS"
        assert await s.create_stream("a", "s", StreamConfig(min_segments=2)) == "SUCCESS"
        assert await s.create_stream("a", "gone", StreamConfig(min_segments=2)) == "SUCCESS"
        assert await s.seal_stream("a", "gone") == "SUCCESS"
        txn, rec = await c.txns.create("a", "s", 60_000)
        txn2, _ = await c.txns.create("a", "s", 60_000)
        await c.store.append(rec.seg_name(0), b"x" * 100)
        before = rec.to_json()
        c.faults.code = errno.ENOSPC if op == "wal.write" else errno.EIO
        c.faults.failing.add(op)
        calls: list[Any] = [
            s.create_scope("b"),
            s.create_stream("a", "t", StreamConfig(min_segments=3)),
            s.scale("a", "s", [0], [(0.0, 0.25), (0.25, 0.5)]),
            s.update_stream("a", "s", StreamConfig(min_segments=4)),
            s.truncate("a", "s", {0: 50, 1: 0}),
            s.seal_stream("a", "s"),
            s.delete_stream("a", "gone"),
            s.delete_scope("e"),
            c.txns.create("a", "s", 60_000),
            c.txns.commit(txn),
            c.txns.abort(txn2),
            groups.create_group("a", "g", "", b"config"),
        ]
        for call in calls:
            with pytest.raises(StorageUnavailable):
                await call
        # Nothing changed that was not durable: no new scope or stream, no half scale,
        # the transactions still open (a ping must not answer COMMITTED).
        assert "b" not in s.md.scopes and "e" in s.md.scopes
        assert s.get("a", "t") is None and "t" not in s.list_streams("a", "")[0]
        assert not any(c.store.exists(f"a/t/{i}.#epoch.0") for i in range(3))
        assert s.get("a", "s").to_json() == before  # type: ignore[union-attr]
        assert s.get("a", "gone") is not None
        assert (txn.state, txn2.state) == (TXN_OPEN, TXN_OPEN)
        assert await c.txns.ping(txn, 60_000) == "OK"
        assert groups.group("a", "g") is None
        # The background duties meet the same store and fail the same way, changing nothing.
        with pytest.raises(StorageUnavailable):
            await s.truncate_locked(s.get("a", "s"), {0: 50, 1: 0})  # type: ignore[arg-type]
        await s.finish_pending()
        await c.txns.finish_pending()
        assert s.get("a", "s").to_json() == before  # type: ignore[union-attr]

        c.heal()  # space is back: the same calls work
        assert await s.create_scope("b") == "SUCCESS"
        assert await s.create_stream("a", "t", StreamConfig(min_segments=3)) == "SUCCESS"
        assert await s.truncate("a", "s", {0: 50, 1: 0}) == "SUCCESS"
        assert (await s.scale("a", "s", [0], [(0.0, 0.25), (0.25, 0.5)]))[0] == "STARTED"
        assert await c.txns.commit(txn) == "SUCCESS"
        assert await c.txns.abort(txn2) == "SUCCESS"
        assert await s.delete_stream("a", "gone") == "SUCCESS"
        assert (await groups.create_group("a", "g", "", b"config"))[0] == "SUCCESS"
        assert await s.seal_stream("a", "s") == "SUCCESS"
        assert_consistent(c)
    async with opened(tmp_path) as c:
        assert_consistent(c)
        assert set(c.streams.md.scopes) == {"a", "b", "e"}
        assert c.streams.get("a", "gone") is None
        assert c.streams.md.txns[txn.key].state == TXN_COMMITTED


async def test_a_seal_that_failed_half_way_is_finished_before_success(tmp_path: Path) -> None:
    """Its record said sealed, its segments were not: a retry answered SUCCESS at once
    while writers could still append to the "sealed" stream."""
    async with opened(tmp_path) as c:
        await c.streams.create_scope("a")
        await c.streams.create_stream("a", "s", StreamConfig(min_segments=2))
        c.fail_method("seal")
        with pytest.raises(StorageUnavailable):
            await c.streams.seal_stream("a", "s")
        assert segments_of(c, "a", "s") == {0: (True, False), 1: (True, False)}
        c.heal()
        assert await c.streams.seal_stream("a", "s") == "SUCCESS"
        assert segments_of(c, "a", "s") == {0: (True, True), 1: (True, True)}
        assert_consistent(c)


async def test_a_delete_that_failed_half_way_is_finished_by_its_retry(tmp_path: Path) -> None:
    async with opened(tmp_path) as c:
        await c.streams.create_scope("a")
        await c.streams.create_stream("a", "s", StreamConfig(min_segments=2))
        await c.streams.seal_stream("a", "s")
        c.fail_method("delete")
        with pytest.raises(StorageUnavailable):
            await c.streams.delete_stream("a", "s")
        c.heal()
        assert await c.streams.delete_stream("a", "s") == "SUCCESS"  # was STREAM_NOT_SEALED
        assert c.streams.get("a", "s") is None
        assert not c.store.exists("a/s/0.#epoch.0")
        assert await c.streams.delete_scope("a") == "SUCCESS"


async def test_a_scale_that_failed_half_way_is_finished_by_retry_or_background(
    tmp_path: Path,
) -> None:
    ranges = [(0.0, 0.25), (0.25, 0.5)]
    async with opened(tmp_path) as c:
        await c.streams.create_scope("a")
        for name in ("r", "b"):
            await c.streams.create_stream("a", name, StreamConfig(min_segments=2))
            c.fail_method("create_segment")
            with pytest.raises(StorageUnavailable):
                await c.streams.scale("a", name, [0], ranges)
            c.heal()
            rec = c.streams.get("a", name)
            assert rec is not None and rec.pending is not None and len(rec.epochs) == 1
        # The client repeats the scale it got UNAVAILABLE for: STARTED, done once.
        status, rec = await c.streams.scale("a", "r", [0], ranges)
        assert status == "STARTED" and rec is not None and rec.pending is None
        assert len(rec.epochs) == 2
        # Nobody repeats it: the background duty finishes it.
        await c.streams.finish_pending()
        rec = c.streams.get("a", "b")
        assert rec is not None and rec.pending is None and len(rec.epochs) == 2
        # Repeating a finished scale is answered as done; another one is still refused.
        assert (await c.streams.scale("a", "b", [0], ranges))[0] == "STARTED"
        assert (await c.streams.scale("a", "b", [1], ranges))[0] == "PRECONDITION_FAILED"
        assert_consistent(c)
    async with opened(tmp_path) as c:
        assert_consistent(c)
        assert all(len(c.streams.get("a", n).epochs) == 2 for n in "rb")  # type: ignore[union-attr]


async def test_a_creation_whose_segments_failed_leaves_no_stream_listed(tmp_path: Path) -> None:
    """The record and the segments are written together: a record that got through while
    its segments did not (another container's log is full) used to leave the stream listed
    and routable, with no segments, until a restart."""
    async with opened(tmp_path) as c:
        await c.streams.create_scope("a")
        c.fail_method("create_segment")
        with pytest.raises(StorageUnavailable):
            await c.streams.create_stream("a", "s", StreamConfig(min_segments=2))
        assert c.streams.get("a", "s") is None
        assert c.streams.list_streams("a", "") == ([], "")
        c.heal()
    async with opened(tmp_path) as c:
        assert c.streams.get("a", "s") is None
        assert await c.streams.create_stream("a", "s", StreamConfig(min_segments=2)) == "SUCCESS"
        assert_consistent(c)


async def test_a_creation_whose_record_cannot_be_removed_is_hidden_then_removed(
    tmp_path: Path,
) -> None:
    async with opened(tmp_path) as c:
        await c.streams.create_scope("a")
        real_remove = c.streams.md._remove

        async def remove_fails(keys: list[str]) -> None:
            raise StorageUnavailable("metadata", "no space left on device (injected)")

        c.streams.md._remove = remove_fails  # type: ignore[method-assign]
        c.fail_method("create_segment")
        with pytest.raises(StorageUnavailable):
            await c.streams.create_stream("a", "s", StreamConfig(min_segments=2))
        assert c.streams.get("a", "s") is None  # hidden at once
        c.heal()
        c.streams.md._remove = real_remove  # type: ignore[method-assign]
        await c.streams.finish_pending()  # and removed durably
    async with opened(tmp_path) as c:
        assert c.streams.get("a", "s") is None


async def test_a_commit_whose_merges_failed_is_finished_in_the_background(
    tmp_path: Path,
) -> None:
    async with opened(tmp_path) as c:
        await c.streams.create_scope("a")
        await c.streams.create_stream("a", "s", StreamConfig(min_segments=2))
        txn, rec = await c.txns.create("a", "s", 60_000)
        for sid in txn.segments:
            await c.store.append(rec.seg_name(sid) + txn.suffix, f"t{sid}".encode())
        c.fail_method("merge")
        with pytest.raises(StorageUnavailable):
            await c.txns.commit(txn)
        assert txn.state == TXN_COMMITTING  # durable: the commit will happen
        assert await c.txns.ping(txn, 60_000) == "COMMITTED"
        c.heal()
        await c.txns.finish_pending()
        assert txn.state == TXN_COMMITTED
        for sid in txn.segments:
            data = bytes((await c.store.read(rec.seg_name(sid), 0, 100)).data)
            assert data == f"t{sid}".encode()  # once
        assert_consistent(c)


async def test_retention_on_a_full_disk_truncates_nothing_then_catches_up(tmp_path: Path) -> None:
    async with opened(tmp_path) as c:
        await c.streams.create_scope("a")
        cfg = StreamConfig(min_segments=1, retention_type=2, retention_param=100)
        await c.streams.create_stream("a", "s", cfg)
        retention = Retention(c.streams, interval_s=0.0)
        await c.store.append("a/s/0.#epoch.0", b"x" * 300)
        await retention.run()  # records a cut
        await c.store.append("a/s/0.#epoch.0", b"y" * 300)
        c.faults.failing.add("wal.write")
        with pytest.raises(StorageUnavailable):
            await retention.run()
        assert c.store.info("a/s/0.#epoch.0").start_offset == 0
        c.heal()
        await retention.run()
        assert c.store.info("a/s/0.#epoch.0").start_offset == 300
        assert_consistent(c)


async def test_the_auto_scaler_on_a_full_disk_splits_nothing_then_splits(tmp_path: Path) -> None:
    async with opened(tmp_path) as c:
        await c.streams.create_scope("a")
        cfg = StreamConfig(scale_type=1, target_rate=1, scale_factor=2, min_segments=1)
        await c.streams.create_stream("a", "hot", cfg)
        scaler = AutoScaler(c.streams, window_s=0.001, cooldown_s=0.0)
        await scaler.run()  # the first sample
        await c.store.append("a/hot/0.#epoch.0", b"x" * 100_000)  # far over 1 KB/s
        c.faults.failing.add("wal.write")
        with pytest.raises(StorageUnavailable):
            await scaler.run()
        rec = c.streams.get("a", "hot")
        assert rec is not None and rec.pending is None and len(rec.epochs) == 1
        c.heal()
        await c.store.append("a/hot/0.#epoch.0", b"x" * 100_000)
        await scaler.run()
        rec = c.streams.get("a", "hot")
        assert rec is not None and len(rec.current.segments) == 2
        assert_consistent(c)
