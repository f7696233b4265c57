"""Writing rows to a stream (``option("stream", "scope/stream")``), exactly once, in
controller transactions.

Contract:

* **Tasks** (:func:`write_stream_partition`): each task attempt opens one controller
  transaction on the stream, routes each row by its ``routingKeyColumn`` value over the
  transaction's key ranges exactly as the official clients route a routing key (a null
  key, or no key column: the row goes with the keyless rows, whose events land on random
  segments), cuts each segment's rows, in partition order, into events of at most
  ``rowsPerEvent`` rows (split further above ``maxEventBytes``), writes them into the
  transaction, waits until they are durable there and returns the transaction's id in its
  commit message. Nothing is visible to readers yet. A failing attempt aborts its
  transaction; one whose process died leaves it open until its lease runs out, and the
  controller then aborts it (:data:`LEASE_MS`).
* **Driver**: ``commit`` commits the transactions of the messages Spark hands it (one
  per partition: the attempt that won), each atomically into the stream;
  ``abort`` aborts them. A repeated commit of a transaction is a no-op at the controller.
* **Markers** (a ``writeId`` batch write, and every streaming micro-batch): as for
  segments (see :mod:`.commit`), but the marker attribute lives on the stream's marker
  segment ``<scope>/<stream>/_spark.commits`` (segment names of a stream carry
  ``.#epoch.``, so it never collides with one). A task of a write whose marker is
  reached writes nothing; commit records the transactions as the write's intent
  (:mod:`.stream_intent`), commits them, then raises the marker, so a replay after a
  driver died in between commits the recorded transactions, not its own.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import pyarrow as pa

try:
    from pyspark.sql.datasource import WriterCommitMessage
except ImportError:  # pragma: no cover - Spark < 4

    class WriterCommitMessage:  # type: ignore[no-redef]
        """Stand-in for Spark 4's commit message base class."""


from ..client import Client
from ..errors import NoSuchSegment, SegmentStoreError
from ..streams.controller_client import NoSuchStream, split_stream
from ..streams.routing import KeyRanges, key_hash
from ..streams.transaction import Transaction
from . import stream_intent
from .codec import ArrowEncoder, rows_of_batch
from .connect import run_with_client
from .options import WriteOptions, commit_marker
from .writer import ArrowGroup, Group, MsgpackGroup, encode_pieces

log = logging.getLogger("segmentstore_client.spark")
T = TypeVar("T")

LEASE_MS: Final = 600_000
"""Lease of a task's transaction: the controller's maximum. The controller aborts a
transaction not pinged for twice its lease (20 minutes), so a write whose driver commits
later than that after its first task finished loses those tasks' transactions (the
commit then fails, naming them)."""
MARKER_SEGMENT: Final = "_spark.commits"
_CAS_TRIES: Final = 20


def marker_segment(stream: str) -> str:
    """The segment whose attributes hold a stream's commit markers.

    Example: ``marker_segment("shop/orders") == "shop/orders/_spark.commits"``
    """
    scope, name = split_stream(stream)
    return f"{scope}/{name}/{MARKER_SEGMENT}"


@dataclass(frozen=True, slots=True)
class StreamJob:
    """What every task of one stream write needs (pickled into the tasks)."""

    options: WriteOptions
    schema_json: str
    marker_scope: str | None = None
    marker_seq: int = 0

    @property
    def stream(self) -> str:
        assert self.options.stream is not None
        return self.options.stream


@dataclass
class TxnCommit(WriterCommitMessage):  # type: ignore[misc]
    """A partition's successful attempt: the transaction that holds its rows.

    Example::

        msg = write_stream_partition(job, 0, 0, batches)
        msg.txn_id, msg.rows, msg.events
    """

    partition: int
    attempt: int
    stream: str
    writer_id: str
    txn_id: str = ""
    high: int = 0
    low: int = 0
    rows: int = 0
    events: int = 0
    bytes: int = 0
    skipped: bool = False
    query_id: str | None = None
    batch_id: int | None = None


# --- routing rows ------------------------------------------------------------------------


def _key_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("latin-1")
    if isinstance(value, str):
        return value
    raise SegmentStoreError(
        f"routingKeyColumn holds {type(value).__name__} values; it must be string or binary"
    )


class RowRouter:
    """Splits Arrow batches into per-segment pieces (row order kept within each).

    Example::

        router = RowRouter(txn.key_ranges, "user")
        for sid, piece, key in router.split(batch): ...
    """

    def __init__(self, ranges: KeyRanges, key_column: str | None) -> None:
        self._route = ranges.route
        self._column = key_column
        self._cache: dict[str, int] = {}

    def split(self, batch: pa.RecordBatch) -> Iterator[tuple[int | None, pa.RecordBatch, str]]:
        """``(segment id or None for keyless rows, rows, one key routed there)``."""
        if self._column is None:
            yield None, batch, ""
            return
        idx = batch.schema.get_field_index(self._column)
        if idx < 0:
            raise SegmentStoreError(
                f"routingKeyColumn {self._column!r} is not a column of the data "
                f"(columns: {', '.join(batch.schema.names)})"
            )
        rows: dict[int | None, list[int]] = {}
        first: dict[int | None, str] = {}
        cache, route = self._cache, self._route
        for i, value in enumerate(batch.column(idx).to_pylist()):
            key = _key_text(value)
            sid: int | None = None
            if key is not None:
                sid = cache.get(key)
                if sid is None:
                    sid = cache[key] = route(key_hash(key))
            got = rows.get(sid)
            if got is None:
                rows[sid] = got = []
                first[sid] = key or ""
            got.append(i)
        for sid, indices in rows.items():
            piece = batch if len(rows) == 1 else batch.take(pa.array(indices, pa.int64()))
            yield sid, piece, first[sid]


@dataclass
class _Pending:
    """Rows routed to one segment, not yet written."""

    key: str | None
    slices: list[pa.RecordBatch] = field(default_factory=list)
    rows: int = 0

    def take(self, n: int) -> list[pa.RecordBatch]:
        out: list[pa.RecordBatch] = []
        need = n
        while need and self.slices:
            s = self.slices[0]
            if s.num_rows <= need:
                out.append(self.slices.pop(0))
                need -= s.num_rows
            else:
                out.append(s.slice(0, need))
                self.slices[0] = s.slice(need)
                need = 0
        self.rows -= n - need
        return out


# --- the task ----------------------------------------------------------------------------


async def _marker_reached(client: Client, job: StreamJob) -> bool:
    if job.marker_scope is None:
        return False
    try:
        value = await client.get_attribute(
            marker_segment(job.stream), commit_marker(job.marker_scope)
        )
    except NoSuchSegment:
        return False
    return value is not None and value >= job.marker_seq


class _TxnFiller:
    """Encodes pending rows into events and writes them into one transaction."""

    def __init__(self, job: StreamJob, txn: Transaction, msg: TxnCommit) -> None:
        self.job, self.txn, self.msg = job, txn, msg
        self.encoder: ArrowEncoder | None = None
        opts = job.options
        self.codec = "none" if opts.compression == "none" else opts.compression

    def group(self, slices: list[pa.RecordBatch]) -> Group:
        opts = self.job.options
        if opts.encoding == "arrow":
            if self.encoder is None:
                self.encoder = ArrowEncoder(
                    slices[0].schema, self.job.schema_json, opts.compression
                )
            return ArrowGroup(slices, self.encoder)
        rows: list[Any] = []
        for s in slices:
            rows.extend(rows_of_batch(s))
        return MsgpackGroup(rows, self.job.schema_json, self.codec)

    async def write(self, pending: _Pending, rows: int) -> None:
        group = self.group(pending.take(rows))
        for payload, _n in encode_pieces(group, self.job.options.max_event_bytes):
            await self.txn.write(payload, routing_key=pending.key)
            self.msg.events += 1
            self.msg.bytes += len(payload)


async def _write(
    client: Client,
    job: StreamJob,
    partition: int,
    attempt: int,
    batches: Iterable[pa.RecordBatch],
    msg: TxnCommit,
) -> TxnCommit:
    opts = job.options
    txn: Transaction | None = None
    try:
        if await _marker_reached(client, job):
            msg.skipped = True
            msg.rows = sum(b.num_rows for b in batches)
            return msg
        writer = client.stream_writer(job.stream, msg.writer_id)
        txn = await writer.begin(LEASE_MS)
        msg.txn_id, msg.high, msg.low = str(txn.id), txn.high, txn.low
        router = RowRouter(KeyRanges(txn.key_ranges), opts.routing_key_column)
        filler = _TxnFiller(job, txn, msg)
        pending: dict[int | None, _Pending] = {}
        per_event = opts.rows_per_event
        for batch in batches:
            msg.rows += batch.num_rows
            for sid, piece, key in router.split(batch):
                p = pending.get(sid)
                if p is None:
                    p = pending[sid] = _Pending(None if sid is None else key)
                p.slices.append(piece)
                p.rows += piece.num_rows
                while p.rows >= per_event:
                    await filler.write(p, per_event)
        for p in pending.values():
            if p.rows:
                await filler.write(p, p.rows)
        await txn.flush()
        return msg
    except BaseException:
        if txn is not None:
            try:
                await txn.abort()
            except Exception as e:  # the original error matters more; the lease ends it
                log.warning("aborting transaction %s failed: %s", txn.id, e)
        raise


def write_stream_partition(
    job: StreamJob,
    partition: int,
    attempt: int,
    batches: Iterable[pa.RecordBatch],
    *,
    query_id: str | None = None,
    batch_id: int | None = None,
) -> TxnCommit:
    """Write one partition's rows into a new transaction of the stream (see the module
    docstring); returns the message naming the transaction.

    Example::

        msg = write_stream_partition(job, ctx.partitionId(), ctx.attemptNumber(), batches)
    """
    wid = f"spark-{uuid.uuid4()}"  # one per attempt: each attempt has its own transaction
    msg = TxnCommit(partition, attempt, job.stream, wid, query_id=query_id, batch_id=batch_id)
    return _run(job.options, lambda c: _write(c, job, partition, attempt, batches, msg))


# --- the driver --------------------------------------------------------------------------


async def _end(
    client: Client, m: TxnCommit, method: str, ok: tuple[str, ...] = ("SUCCESS",)
) -> str:
    c = client.controller
    pb = c.messages()
    req = pb.TxnRequest(
        streamInfo=c.info(*split_stream(m.stream)),
        txnId=pb.TxnId(highBits=m.high, lowBits=m.low),
        writerId=m.writer_id,
    )
    what = f"{method} of transaction {m.txn_id} (partition {m.partition})"
    return c.check(await c.call(method, req), what, ok)


def _messages(messages: Iterable[Any]) -> list[TxnCommit]:
    return [m for m in messages if isinstance(m, TxnCommit) and not m.skipped and m.txn_id]


async def _raise_marker(client: Client, job: StreamJob) -> None:
    assert job.marker_scope is not None
    seg = marker_segment(job.stream)
    attr = commit_marker(job.marker_scope)
    for _ in range(_CAS_TRIES):  # bounded: another writer of the scope moves it on
        current = await client.get_attribute(seg, attr)
        if current is not None and current >= job.marker_seq:
            return
        if await client.compare_and_set_attribute(seg, attr, job.marker_seq, current):
            return
    raise SegmentStoreError(f"could not raise the commit marker on {seg!r}")


def prepare_stream(options: WriteOptions, marker: bool) -> None:
    """On the driver: check the stream exists (one line if not) and, for a write with a
    marker, create the marker segment."""
    assert options.stream is not None
    stream = options.stream

    async def work(client: Client) -> None:
        scope, name = split_stream(stream)
        try:
            missing = not await client.controller.current_segments(scope, name)
        except NoSuchStream:
            missing = True
        if missing:
            raise SegmentStoreError(
                f"stream {stream!r} has no open segment (missing or sealed); nothing written"
            )
        if marker:
            await client.create_segment(marker_segment(stream), exist_ok=True)

    _run(options, work)


def _run(options: WriteOptions, work: Callable[[Client], Awaitable[T]]) -> T:
    return run_with_client(options.endpoint, options.timeouts, options.access, work)


def commit_stream_write(job: StreamJob, messages: Iterable[Any]) -> int:
    """Commit the partitions' transactions, then raise the marker (if any); returns how
    many transactions this call committed. With a marker the transactions are first
    recorded as the write's intent (:mod:`.stream_intent`): a commit that finds an
    intent of an earlier driver commits those instead and aborts its own; a write whose
    marker is already reached aborts its own (its tasks normally wrote nothing)."""
    found = sorted(_messages(messages), key=lambda m: m.partition)

    async def work(client: Client) -> int:
        if job.marker_scope is None:
            for m in found:
                await _end(client, m, "commitTransaction")
            return len(found)
        scope, seq, seg = job.marker_scope, job.marker_seq, marker_segment(job.stream)
        if await _marker_reached(client, job):
            for m in found:  # FAILURE: that very transaction was committed before
                await _end(client, m, "abortTransaction", ("SUCCESS", "FAILURE"))
            return 0
        prior = await stream_intent.recorded(client, seg, scope, seq)
        if prior is None:
            todo = found
            await stream_intent.record(client, seg, scope, seq, [(m.high, m.low) for m in found])
        else:
            log.warning("stream write %s/%d: finishing an earlier commit's intent", scope, seq)
            for m in found:
                if (m.high, m.low) not in prior:
                    await _end(client, m, "abortTransaction", ("SUCCESS", "FAILURE"))
            todo = [_recorded_txn(job.stream, i, h, lo) for i, (h, lo) in enumerate(prior)]
        for m in todo:
            await _end(client, m, "commitTransaction")
        await _raise_marker(client, job)
        await stream_intent.clear(client, seg, scope, seq, len(todo))
        return len(todo)

    done: int = _run(job.options, work)
    log.info("stream write to %s: %d transactions committed", job.stream, done)
    return done


def _recorded_txn(stream: str, i: int, high: int, low: int) -> TxnCommit:
    from ..streams.transaction import txn_suffix

    txn = uuid.UUID(txn_suffix(high, low).split(".")[1])
    return TxnCommit(i, 0, stream, "spark-intent", str(txn), high, low)


def abort_stream_write(job: StreamJob, messages: Iterable[Any]) -> str:
    """Abort the transactions the messages name; returns a one-line report."""
    found = _messages(messages)

    async def work(client: Client) -> list[str]:
        failed = []
        for m in found:
            try:
                await _end(client, m, "abortTransaction")
            except SegmentStoreError as e:
                failed.append(f"{m.txn_id}: {e}")
        return failed

    failed: list[str] = _run(job.options, work)
    report = (
        f"segmentstore write to stream {job.stream!r} aborted: {len(found) - len(failed)} "
        "transactions aborted (attempts that died leave theirs to expire with their lease)"
    )
    if failed:
        report += "; not aborted: " + "; ".join(failed)
    return report
