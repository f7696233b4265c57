"""Transactions: create (with a lease), ping, commit, abort, state, and lease expiry.

Contract:

* A transaction owns one segment per segment of the epoch it was opened in, named
  ``<parent>#transaction.<id>``. Its id has the epoch in the top 32 bits of ``highBits``
  (the official client reads it there) and a non-negative, increasing ``lowBits``.
* Commit first makes the record COMMITTING (durable, with its place in the stream's commit
  order), then merges each transaction segment into its parent, then records COMMITTED.
  A merge is atomic in the store and removes its source, so after a crash between merges
  ``recover()`` merges exactly the segments still left: every event lands once.
* A transaction opened before a scale commits as Pravega's "rolling transaction" does: the
  stream scales to copies of the transaction's epoch (same key ranges), the transaction
  segments merge into those copies, and the stream scales back to copies of the epoch that
  was current. Readers see the transaction's events after everything written before the
  commit and before everything written after it, key range by key range.
* A transaction not pinged for ``lease * LEASE_SLACK`` is aborted (the official client
  pings only once per lease, so expiring exactly at the lease would abort live ones).
  Sealing a stream aborts its open transactions (after the seal is durable). Finished records are kept for
  ``KEEP_FINISHED_MS`` so that late state checks get a real answer.
* A state change shows in memory only once its record is durable (``_put``): a failed
  write (disk full) leaves the transaction as it was, so a ping never answers COMMITTED
  for a commit that was not recorded. A commit or abort whose store steps failed after
  its COMMITTING/ABORTING record was durable is finished by the next call or the
  background ``finish_pending``.
"""

from __future__ import annotations

import contextlib
import logging
import random
from collections.abc import Callable

from ..storage import SegmentExists, SegmentNotFound, StorageError, StorageUnavailable
from .metadata import Metadata
from .model import (
    TXN_ABORTED,
    TXN_ABORTING,
    TXN_COMMITTED,
    TXN_COMMITTING,
    TXN_OPEN,
    StreamRecord,
    TxnRecord,
    txn_suffix,
)
from .streams import BadRequest, Streams, now_ms

log = logging.getLogger("segmentstore.controller")

MAX_LEASE_MS = 600_000
LEASE_SLACK = 2.0
KEEP_FINISHED_MS = 3_600_000


class TxnNotFound(LookupError):
    pass


class TooManyTxns(RuntimeError):
    """A stream has as many open transactions as allowed (gRPC RESOURCE_EXHAUSTED)."""


class Transactions:
    def __init__(self, streams: Streams, md: Metadata, clock: Callable[[], int] = now_ms) -> None:
        self.streams = streams
        self.md = md
        self.store = streams.store
        self.clock = clock
        self._last_low = 0
        self.committed = 0
        self.aborted = 0
        self.max_open_per_stream = 10_000  # a bound on memory and segments per stream

    def open_count(self) -> int:
        return sum(1 for t in self.md.txns.values() if t.state == TXN_OPEN)

    def find(self, scope: str, stream: str, high: int, low: int) -> TxnRecord:
        key = f"{scope}/{stream}/{high & 0xFFFFFFFFFFFFFFFF:016x}{low & 0xFFFFFFFFFFFFFFFF:016x}"
        txn = self.md.txns.get(key)
        if txn is None:
            raise TxnNotFound(key)
        return txn

    def _expiry(self, lease_ms: int) -> int:
        return self.clock() + int(lease_ms * LEASE_SLACK)

    async def create(
        self, scope: str, stream: str, lease_ms: int
    ) -> tuple[TxnRecord, StreamRecord]:
        if not 0 < lease_ms <= MAX_LEASE_MS:
            raise BadRequest(f"lease must be 1..{MAX_LEASE_MS} ms, not {lease_ms}")
        rec = self.streams.get(scope, stream)
        if rec is None:
            raise TxnNotFound(f"{scope}/{stream}")
        async with self.streams.lock(rec.key):
            rec = self.streams.get(scope, stream)
            if rec is None or rec.state != "active":
                raise BadRequest(f"stream {scope}/{stream} is not open for writing")
            prefix = rec.key + "/"
            opened = sum(
                1 for k, t in self.md.txns.items() if t.state == TXN_OPEN and k.startswith(prefix)
            )
            if opened >= self.max_open_per_stream:
                raise TooManyTxns(
                    f"stream {rec.key} has {opened} open transactions, the most allowed "
                    "(controller_max_open_txns); commit or abort some first"
                )
            epoch = rec.current
            high = (epoch.epoch << 32) | random.getrandbits(31)
            low = self._last_low = max(self._last_low + 1, self.clock() * 1000)
            txn = TxnRecord(
                scope, stream, high, low, epoch.epoch, list(epoch.segments), lease_ms,
                self._expiry(lease_ms),
            )  # fmt: skip
            # Segments first; a crash before the record leaves orphans that startup removes.
            try:
                for sid in txn.segments:
                    with contextlib.suppress(SegmentExists):
                        await self.store.create_segment(rec.seg_name(sid) + txn.suffix)
                await self.md.put_txn(txn)
            except StorageUnavailable:  # disk full: leave no orphan behind while running
                for sid in txn.segments:
                    with contextlib.suppress(StorageError):
                        await self.store.delete(rec.seg_name(sid) + txn.suffix)
                raise
        return txn, rec

    async def ping(self, txn: TxnRecord, lease_ms: int) -> str:
        if txn.state == TXN_COMMITTED or txn.state == TXN_COMMITTING:
            return "COMMITTED"
        if txn.state != TXN_OPEN:
            return "ABORTED"
        if not 0 < lease_ms <= MAX_LEASE_MS:
            return "LEASE_TOO_LARGE"
        txn.expires_ms = self._expiry(lease_ms)  # kept in memory; a restart renews it anyway
        return "OK"

    async def commit(self, txn: TxnRecord) -> str:
        async with self.streams.lock(f"{txn.scope}/{txn.stream}"):
            if txn.state in (TXN_COMMITTED, TXN_COMMITTING):
                if txn.state == TXN_COMMITTING:
                    await self._finish_commit(txn)
                return "SUCCESS"
            if txn.state != TXN_OPEN:
                return "FAILURE"
            rec = self.streams.get(txn.scope, txn.stream)
            if rec is None:
                return "STREAM_NOT_FOUND"
            if rec.state != "active":  # sealed: its open transactions are aborted
                await self.abort_locked(txn)
                return "FAILURE"
            orders = [t.order for t in self.md.txns.values() if t.key.startswith(rec.key + "/")]
            await self._put(txn, state=TXN_COMMITTING, order=max(orders, default=0) + 1)
            log.info("committing transaction %s (%d segment(s))", txn.key, len(txn.segments))
            await self._finish_commit(txn)
        return "SUCCESS"

    async def _finish_commit(self, txn: TxnRecord) -> None:
        rec = self.streams.get(txn.scope, txn.stream)
        if rec is None:
            return
        targets = txn.segments
        if txn.roll_epoch >= 0 or rec.current.epoch != txn.epoch:
            rec, targets = await self._roll_forward(rec, txn)
        for parent, target in zip(txn.segments, targets, strict=True):
            source = rec.seg_name(parent) + txn.suffix
            if self.store.exists(source):
                await self.store.merge(rec.seg_name(target), source)
        if txn.roll_epoch >= 0 and rec.current.epoch == txn.roll_epoch:
            # Scale back to the key ranges of the epoch the copies replaced.
            before = rec.epochs[txn.roll_epoch - 1]
            ranges = [rec.segments[s].key_range for s in before.segments]
            await self.streams.scale_locked(rec, list(targets), ranges)
        await self._put(txn, state=TXN_COMMITTED, finished_ms=self.clock())
        self.committed += 1

    async def _roll_forward(
        self, rec: StreamRecord, txn: TxnRecord
    ) -> tuple[StreamRecord, list[int]]:
        """Make (or find, after a crash) the epoch of copies of the transaction's segments."""
        if txn.roll_epoch < 0:
            if rec.state != "active":
                raise BadRequest("the stream was sealed before the transaction committed")
            await self._put(txn, roll_epoch=len(rec.epochs))
        if len(rec.epochs) <= txn.roll_epoch:
            ranges = [rec.segments[s].key_range for s in txn.segments]
            rec = await self.streams.scale_locked(rec, list(rec.current.segments), ranges)
        copies = rec.epochs[txn.roll_epoch].segments
        return rec, list(copies)

    async def abort(self, txn: TxnRecord) -> str:
        async with self.streams.lock(f"{txn.scope}/{txn.stream}"):
            return await self.abort_locked(txn)

    async def abort_locked(self, txn: TxnRecord) -> str:
        if txn.state in (TXN_ABORTED, TXN_ABORTING):
            if txn.state == TXN_ABORTING:
                await self._finish_abort(txn)
            return "SUCCESS"
        if txn.state != TXN_OPEN:
            return "FAILURE"
        await self._put(txn, state=TXN_ABORTING)
        await self._finish_abort(txn)
        return "SUCCESS"

    async def _finish_abort(self, txn: TxnRecord) -> None:
        rec = self.streams.get(txn.scope, txn.stream)
        if rec is not None:
            for parent in txn.segments:
                with contextlib.suppress(SegmentNotFound):
                    await self.store.delete(rec.seg_name(parent) + txn.suffix)
        await self._put(txn, state=TXN_ABORTED, finished_ms=self.clock())
        self.aborted += 1

    async def _put(self, txn: TxnRecord, **changes: int) -> None:
        """Change ``txn`` and write it; on a failed write (nothing applied) undo the change."""
        before = {name: getattr(txn, name) for name in changes}
        for name, value in changes.items():
            setattr(txn, name, value)
        try:
            await self.md.put_txn(txn)
        except StorageUnavailable:
            for name, value in before.items():
                setattr(txn, name, value)
            raise

    # ------------------------------------------------------------------ background

    async def recover(self) -> None:
        """Finish commits and aborts a crash interrupted (in commit order); renew leases;
        remove transaction segments that no transaction owns. What the store cannot write
        now (disk still full) is left to ``finish_pending``."""
        for txn in self.md.txns.values():
            if txn.state == TXN_OPEN:
                txn.expires_ms = self._expiry(txn.lease_ms)
        try:
            await self.finish_pending()
        except StorageUnavailable as e:
            log.warning("cannot finish the interrupted transactions yet: %s", e)
            return
        owned = {
            self.md.streams[t.key.rsplit("/", 1)[0]].seg_name(s) + t.suffix
            for t in self.md.txns.values()
            if t.key.rsplit("/", 1)[0] in self.md.streams
            for s in t.segments
        }
        for name in self.store.segment_names():
            if "#transaction." in name and name not in owned and self._is_stream_txn(name):
                log.info("deleting transaction segment %s that no transaction owns", name)
                with contextlib.suppress(SegmentNotFound):
                    await self.store.delete(name)

    async def finish_pending(self) -> None:
        """Finish every COMMITTING or ABORTING transaction, in commit order per stream
        (after a crash, or a commit whose merges failed on a full disk), and abort the open
        transactions of sealed streams (a seal the crash interrupted)."""
        for txn in [t for t in self.md.txns.values() if t.state == TXN_OPEN]:
            rec = self.streams.get(txn.scope, txn.stream)
            if rec is not None and rec.state != "active":
                await self.abort(txn)
        unfinished = [t for t in self.md.txns.values() if t.state in (TXN_COMMITTING, TXN_ABORTING)]
        for txn in sorted(unfinished, key=lambda t: (t.key.rsplit("/", 1)[0], t.order)):
            if txn.state == TXN_COMMITTING:
                log.info("finishing the commit of transaction %s", txn.key)
                await self.commit(txn)
            elif txn.state == TXN_ABORTING:
                await self.abort(txn)

    def _is_stream_txn(self, name: str) -> bool:
        parent = name.split("#transaction.", 1)[0]
        scope, _, rest = parent.partition("/")
        stream = rest.rpartition("/")[0]
        return f"{scope}/{stream}" in self.md.streams

    async def expire(self) -> int:
        """Abort open transactions whose lease ran out; drop long-finished records."""
        now = self.clock()
        expired = [t for t in self.md.txns.values() if t.state == TXN_OPEN and t.expires_ms < now]
        for txn in expired:
            log.info("transaction %s: lease expired, aborting", txn.key)
            await self.abort(txn)
        old = [
            t
            for t in self.md.txns.values()
            if t.state in (TXN_COMMITTED, TXN_ABORTED) and now - t.finished_ms > KEEP_FINISHED_MS
        ]
        if old:
            await self.md.remove_txns(old)
        return len(expired)

    async def abort_open(self, scope: str, stream: str) -> None:
        """Abort the open transactions of a stream (before sealing it)."""
        for txn in list(self.md.txns.values()):
            if (txn.scope, txn.stream) == (scope, stream) and txn.state == TXN_OPEN:
                await self.abort(txn)


__all__ = ["Transactions", "TxnNotFound", "txn_suffix"]
