"""Writing partitions exactly once, and committing or aborting a write on the driver.

Executor side (:func:`write_partition`): a partition's rows are cut into groups of exactly
``rows_per_event`` rows (group ``k`` = rows ``k*R .. (k+1)*R - 1`` of the partition),
each group is encoded as one event (or, if it encodes above ``max_event_bytes``, split in
halves until the pieces fit, the same way every time), and every event is written with a
number derived from its group and piece (:func:`~.options.event_number`) by a writer whose
id is derived from the write identity, the target segment and the partition id, never the
attempt. A retried or speculative attempt therefore writes as the same writer with the
same numbers: the server reports at AppendSetup the last number it holds, the SDK
acknowledges those events locally (we do not even encode whole groups it already has),
and anything racing in from another attempt is dropped by the server's per-append check.
This requires each partition to see the same rows in the same order on every attempt, as
any Spark sink that de-duplicates by position does (sort or checkpoint before a write
whose input is not deterministic).

Driver side (:func:`commit_write` / :func:`abort_write`):

* ``atomic``: partitions fill transaction segments; commit sets the commit marker, then
  merges each transaction segment into its target in partition order (a merge is atomic
  and idempotent: a missing source was already merged); abort deletes them, leaving
  nothing visible.
* otherwise the events are in the targets already; commit sets the commit marker when the
  write has a deterministic identity (``write_id`` or a streaming batch), so that a later
  driver retry of the same write skips its partitions; abort reports, per partition, what
  the targets hold (the writer's last durable event number and the rows that covers) and
  how to finish the write (run it again with the same ``write_id``).
"""

from __future__ import annotations

import abc
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import pyarrow as pa

try:
    from pyspark.sql.datasource import WriterCommitMessage
except ImportError:  # pragma: no cover - Spark < 4: only the foreachPartition helper runs

    class WriterCommitMessage:  # type: ignore[no-redef]
        """Stand-in for Spark 4's commit message base class."""


from .. import records
from ..errors import EventTooLarge, NoSuchSegment, SegmentStoreError
from ..sync import SyncClient, SyncEventWriter
from ..sync import connect as sync_connect
from .codec import (
    ArrowEncoder,
    arrow_headers,
    encode_rows,
    msgpack_headers,
    rows_of_batch,
)
from .options import (
    LIMIT_EVENT_BYTES,
    PIECE_BITS,
    WriteOptions,
    commit_marker,
    event_number,
    group_of,
    transaction_segment,
    writer_id,
)

log = logging.getLogger("segmentstore_client.spark")

_MARKER_TRIES: Final = 20


@dataclass(frozen=True, slots=True)
class WriteJob:
    """What every task of one write needs (pickled into the tasks).

    ``identity`` names the logical write; ``marker_scope`` / ``marker_seq`` name its
    commit marker when the identity is deterministic (None: no marker).
    """

    options: WriteOptions
    identity: uuid.UUID
    schema_json: str
    marker_scope: str | None = None
    marker_seq: int = 0


@dataclass
class PartitionCommit(WriterCommitMessage):  # type: ignore[misc]
    """What a partition's successful attempt tells the driver.

    ``resumed_from`` is the last event number the server already held for this writer
    when the attempt started (0: none): non-zero means an earlier attempt's events were
    kept and not written again. ``skipped`` means the write was already committed (a
    driver retry of a committed ``write_id``) and nothing was written.

    Example::

        msg = write_partition(job, 0, 1, groups)
        msg.resumed_from, msg.events, msg.rows     # (4194305, 5, 100000)
    """

    partition: int
    attempt: int
    target: str
    segment: str
    writer_id: str
    rows: int = 0
    events: int = 0
    bytes: int = 0
    last_event_number: int = 0
    resumed_from: int = 0
    skipped: bool = False
    query_id: str | None = None
    batch_id: int | None = None
    seconds: float = 0.0


class WriteAborted(SegmentStoreError):
    """Raised by ``abort`` on the driver; its message says what the write left behind.

    Spark attaches it to the job's failure (as a suppressed exception), and it is logged
    at WARNING on the driver under ``segmentstore_client.spark``.

    Example::

        except Exception as e:      # the job's error
            print(e)                # ... Suppressed: ... WriteAborted: segmentstore write ...
    """

    def __init__(self, report: str) -> None:
        super().__init__(report)
        self.report = report


# --- groups of rows ----------------------------------------------------------------------


class Group(abc.ABC):
    """``rows`` consecutive rows of a partition, encodable in any sub-range.

    Example::

        payload = group.encode(0, group.rows)    # the whole group as one event
    """

    __slots__ = ("rows",)

    def __init__(self, rows: int) -> None:
        self.rows = rows

    @abc.abstractmethod
    def encode(self, start: int, count: int) -> bytes:
        """The record payload of rows ``start .. start + count - 1`` of the group."""


def _cut(slices: Sequence[pa.RecordBatch], start: int, count: int) -> list[pa.RecordBatch]:
    out: list[pa.RecordBatch] = []
    pos = 0
    for s in slices:
        n = s.num_rows
        lo, hi = max(start, pos), min(start + count, pos + n)
        if lo < hi:
            out.append(s if (lo == pos and hi == pos + n) else s.slice(lo - pos, hi - lo))
        pos += n
        if pos >= start + count:
            break
    return out


class ArrowGroup(Group):
    """A group of Arrow slices, encoded as one Arrow IPC stream per event."""

    __slots__ = ("_encoder", "_slices")

    def __init__(self, slices: list[pa.RecordBatch], encoder: ArrowEncoder) -> None:
        super().__init__(sum(s.num_rows for s in slices))
        self._slices = slices
        self._encoder = encoder

    def encode(self, start: int, count: int) -> bytes:
        part = (
            self._slices if (start, count) == (0, self.rows) else _cut(self._slices, start, count)
        )
        payload = self._encoder.encode(part)
        return records.encode(payload, headers=arrow_headers(count))


class MsgpackGroup(Group):
    """A group of rows (tuples of Python values), encoded as MessagePack arrays."""

    __slots__ = ("_codec", "_header_schema", "_rows")

    def __init__(self, rows: list[Any], schema_json: str, codec: str) -> None:
        super().__init__(len(rows))
        self._rows = rows
        self._header_schema = schema_json
        self._codec = codec

    def encode(self, start: int, count: int) -> bytes:
        payload = encode_rows(self._rows[start : start + count])
        return records.encode(
            payload, headers=msgpack_headers(count, self._header_schema), codec=self._codec
        )


def arrow_groups(
    batches: Iterable[pa.RecordBatch], options: WriteOptions, schema_json: str
) -> Iterator[Group]:
    """Cut Arrow batches into groups of ``rows_per_event`` rows, in the write's encoding.

    Example::

        for group in arrow_groups(batches, options, schema_json): ...
    """
    from .codec import iter_slices

    if options.record_format:
        from .record_formats import format_groups

        yield from format_groups(batches, options.record_format)
        return
    encoder: ArrowEncoder | None = None
    codec = "none" if options.compression == "none" else options.compression
    for slices in iter_slices(batches, options.rows_per_event):
        if options.encoding == "arrow":
            if encoder is None:
                encoder = ArrowEncoder(slices[0].schema, schema_json, options.compression)
            yield ArrowGroup(slices, encoder)
        else:
            rows: list[Any] = []
            for s in slices:
                rows.extend(rows_of_batch(s))
            yield MsgpackGroup(rows, schema_json, codec)


def row_groups(
    rows: Iterable[Sequence[Any]], rows_per_event: int, schema_json: str, codec: str = "none"
) -> Iterator[Group]:
    """Cut an iterator of rows (tuples, ``Row``) into MessagePack groups.

    Example::

        groups = row_groups(iter(rows), 10_000, schema_json)
    """
    batch: list[Any] = []
    for row in rows:
        batch.append(row)
        if len(batch) == rows_per_event:
            yield MsgpackGroup(batch, schema_json, codec)
            batch = []
    if batch:
        yield MsgpackGroup(batch, schema_json, codec)


def encode_pieces(group: Group, max_bytes: int) -> list[tuple[bytes, int]]:
    """The group's events: one if it fits in ``max_bytes``, else the halves, recursively
    (at most ``log2(rows)`` levels). Returns ``(payload, rows)`` per piece.

    Example::

        [(payload, 10_000)] == encode_pieces(group, 4 << 20)   # a group that fits
    """
    out: list[tuple[bytes, int]] = []

    def split(start: int, count: int) -> None:
        payload = group.encode(start, count)
        if len(payload) <= max_bytes:
            out.append((payload, count))
            return
        if count == 1:
            if len(payload) > LIMIT_EVENT_BYTES:
                raise EventTooLarge(
                    f"one row encodes to {len(payload)} bytes, above the "
                    f"{LIMIT_EVENT_BYTES}-byte event limit"
                )
            out.append((payload, 1))
            return
        half = count // 2
        split(start, half)
        split(start + half, count - half)

    split(0, group.rows)
    return out


# --- the partition writer ----------------------------------------------------------------


def _marker_reached(client: SyncClient, target: str, job: WriteJob) -> bool:
    if job.marker_scope is None:
        return False
    try:
        value = client.get_attribute(target, commit_marker(job.marker_scope))
    except NoSuchSegment:
        return False
    return value is not None and value >= job.marker_seq


def write_partition(
    job: WriteJob,
    partition: int,
    attempt: int,
    groups: Callable[[], Iterator[Group]],
    *,
    query_id: str | None = None,
    batch_id: int | None = None,
    client_factory: Callable[[str, float], SyncClient] | None = None,
) -> PartitionCommit:
    """Write one partition's groups as numbered events; returns its commit message.

    ``groups`` is called only if the partition has to be written (not when the write was
    already committed). Example::

        msg = write_partition(job, ctx.partitionId(), ctx.attemptNumber(),
                              lambda: arrow_groups(batches, job.options, job.schema_json))
    """
    opts = job.options
    target = opts.target_of(partition)
    wid = writer_id(job.identity, target, partition)
    dest = transaction_segment(job.identity, target, partition) if opts.atomic else target
    started = time.monotonic()
    msg = PartitionCommit(
        partition, attempt, target, dest, str(wid), query_id=query_id, batch_id=batch_id
    )
    connect = client_factory or _connect
    client = connect(opts.endpoint, opts.timeout)
    writer: SyncEventWriter | None = None
    try:
        if _marker_reached(client, target, job):
            msg.skipped = True
            log.info("partition %d: write %s already committed; skipping", partition, job.identity)
            return msg
        if opts.atomic:
            client.create_segment(dest, exist_ok=True)
        elif opts.create:
            client.create_segment(target, exist_ok=True)
        # Started now to learn what the server holds; events are written with explicit
        # numbers, and the SDK acknowledges those the server has without sending them.
        writer = client.writer(dest, wid).start()
        have = writer.acked_event_number
        msg.resumed_from = max(0, have)
        last_ack = None
        for k, group in enumerate(groups()):
            msg.rows += group.rows
            if have >= event_number(k + 1):
                continue  # the server holds the whole group: do not even encode it
            for j, (payload, _rows) in enumerate(encode_pieces(group, opts.max_event_bytes)):
                n = event_number(k, j)
                if n <= have:
                    continue  # a piece of a group the server holds part of
                last_ack = writer.write(payload, event_number=n)
                msg.events += 1
                msg.bytes += len(payload)
                msg.last_event_number = n
        if last_ack is not None:
            writer.flush()
        writer.close()
        writer = None
        if msg.last_event_number == 0 and have > 0:
            msg.last_event_number = have
        return msg
    except BaseException:
        if writer is not None:
            try:
                writer.abort()
            except Exception as e:  # the original error matters more
                log.debug("aborting writer after an error failed: %s", e)
        raise
    finally:
        msg.seconds = time.monotonic() - started
        try:
            client.close()
        except Exception as e:
            log.debug("closing client failed: %s", e)


def _connect(endpoint: str, timeout: float) -> SyncClient:
    return sync_connect(endpoint, reconnect_timeout=timeout)


# --- driver side -------------------------------------------------------------------------


@dataclass
class WriteReport:
    """What a commit or an abort did, in numbers and in words (``str(report)``).

    Example::

        print(abort_write(job, messages))   # one line per partition
    """

    identity: str
    committed: bool
    partitions: int
    rows: int = 0
    events: int = 0
    bytes: int = 0
    merged: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        head = (
            f"segmentstore write {self.identity}: "
            + ("committed" if self.committed else "aborted")
            + f", {self.partitions} partition(s), {self.rows} row(s) reported, "
            f"{self.events} event(s), {self.bytes} byte(s)"
        )
        return "\n".join([head, *self.lines])


def _set_marker(client: SyncClient, target: str, scope: str, seq: int) -> None:
    """Raise the commit marker of ``scope`` on ``target`` to at least ``seq``."""
    aid = commit_marker(scope)
    for _ in range(_MARKER_TRIES):
        current = client.get_attribute(target, aid)
        if current is not None and current >= seq:
            return
        if client.compare_and_set_attribute(target, aid, seq, current):
            return
    raise SegmentStoreError(f"could not set the commit marker on {target!r} (contention)")


def _messages(messages: Sequence[WriterCommitMessage | None]) -> list[PartitionCommit | None]:
    return [m if isinstance(m, PartitionCommit) else None for m in messages]


def commit_write(
    job: WriteJob,
    messages: Sequence[WriterCommitMessage | None],
    client_factory: Callable[[str, float], SyncClient] | None = None,
) -> WriteReport:
    """Commit a write whose tasks all succeeded (see the module docstring).

    Example::

        report = commit_write(job, messages)
        print(report)
    """
    opts = job.options
    msgs = _messages(messages)
    report = WriteReport(str(job.identity), True, len(msgs))
    for m in msgs:
        if m is not None:
            report.rows += m.rows
            report.events += m.events
            report.bytes += m.bytes
    client = (client_factory or _connect)(opts.endpoint, opts.timeout)
    try:
        targets = sorted({opts.target_of(p) for p in range(len(msgs))})
        if job.marker_scope is not None:
            for target in targets:
                _set_marker(client, target, job.marker_scope, job.marker_seq)
        if opts.atomic:
            for target in targets:
                client.segment_info(target)  # a missing target raises here, not as "merged"
            for p in range(len(msgs)):
                target = opts.target_of(p)
                txn = transaction_segment(job.identity, target, p)
                try:
                    client.merge(target, txn)
                except NoSuchSegment:
                    continue  # merged by an earlier commit of this write, or never created
                report.merged.append(txn)
            report.lines.append(
                f"merged {len(report.merged)} transaction segment(s) into {', '.join(targets)}"
            )
    finally:
        client.close()
    log.info("%s", report)
    return report


def abort_write(
    job: WriteJob,
    messages: Sequence[WriterCommitMessage | None],
    client_factory: Callable[[str, float], SyncClient] | None = None,
) -> WriteReport:
    """Abort a write: delete its transaction segments (``atomic``), or report what each
    partition left in its target. Example::

        print(abort_write(job, messages))
    """
    opts = job.options
    msgs = _messages(messages)
    report = WriteReport(str(job.identity), False, len(msgs))
    client = (client_factory or _connect)(opts.endpoint, opts.timeout)
    try:
        for p, m in enumerate(msgs):
            if m is not None:
                report.rows += m.rows
                report.events += m.events
                report.bytes += m.bytes
            target = opts.target_of(p)
            if opts.atomic:
                txn = transaction_segment(job.identity, target, p)
                if client.delete(txn, missing_ok=True):
                    report.deleted.append(txn)
                continue
            wid = writer_id(job.identity, target, p)
            try:
                last = client.last_event_number(target, wid)
            except NoSuchSegment:
                last = None
            report.lines.append(_left_behind(p, target, wid, last, m, opts.rows_per_event))
        if opts.atomic:
            report.lines.insert(
                0,
                f"atomic write: deleted {len(report.deleted)} transaction segment(s); "
                f"nothing of this write is visible in {', '.join(opts.segments)}",
            )
        else:
            if job.marker_scope is not None and job.marker_scope.startswith("stream|"):
                hint = (
                    "restart the query from its checkpoint: it replays this micro-batch with "
                    "the same identity and completes it without duplicates"
                )
            elif opts.write_id is not None:
                hint = (
                    f"run the write again with .option('write_id', {opts.write_id!r}) to "
                    "finish it without duplicates"
                )
            else:
                hint = (
                    "the write had no write_id, so a new run writes everything again; give "
                    ".option('write_id', ...) to make retries resume"
                )
            report.lines.insert(0, f"non-atomic write: the targets keep what was written; {hint}")
    finally:
        client.close()
    log.warning("%s", report)
    return report


def _left_behind(
    partition: int,
    target: str,
    wid: uuid.UUID,
    last: int | None,
    msg: PartitionCommit | None,
    rows_per_event: int,
) -> str:
    where = f"partition {partition} -> {target} (writer {wid})"
    if msg is not None:
        if msg.skipped:
            return f"{where}: already committed earlier; nothing written"
        return (
            f"{where}: complete, {msg.rows} row(s) in events up to number {msg.last_event_number}"
        )
    if last is None or last < 1:
        return f"{where}: nothing written"
    group = group_of(last)
    piece = ((last - 1) & ((1 << PIECE_BITS) - 1)) // 2
    rows = (group + 1) * rows_per_event
    return (
        f"{where}: incomplete; events up to number {last} (row group {group}, piece {piece}) "
        f"are durable: rows 0..{rows - 1}, fewer if that group was split into pieces"
    )
