"""Writing partitions exactly once (the executor side of a write).

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

The driver side (commit, abort, overwrite) is :mod:`.commit`.
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
from .codec import (
    ArrowEncoder,
    arrow_headers,
    encode_rows,
    msgpack_headers,
    rows_of_batch,
)
from .connect import open_client
from .options import (
    LIMIT_EVENT_BYTES,
    Timeouts,
    WriteOptions,
    commit_marker,
    event_number,
    fence_attribute,
    transaction_segment,
    writer_id,
)

log = logging.getLogger("segmentstore_client.spark")


@dataclass(frozen=True, slots=True)
class WriteJob:
    """What every task of one write needs (pickled into the tasks).

    ``identity`` names the logical write; ``marker_scope`` / ``marker_seq`` name its
    commit marker when the identity is deterministic (None: no marker). ``run`` is drawn
    on the driver once per run (names transaction segments, keys the abort fence);
    ``overwrite`` stages the write like ``atomic`` and replaces the targets' contents;
    ``ignore`` (``saveMode=ignore`` found data in a target) writes nothing.
    """

    options: WriteOptions
    identity: uuid.UUID
    schema_json: str
    marker_scope: str | None = None
    marker_seq: int = 0
    run: uuid.UUID = field(default_factory=uuid.uuid4)
    overwrite: bool = False
    ignore: bool = False

    @property
    def staged(self) -> bool:
        """Partitions fill transaction segments, merged into the targets on commit."""
        return self.options.atomic or self.overwrite

    def destination(self, partition: int) -> str:
        """Where a partition's events go: its transaction segment, or its target."""
        target = self.options.target_of(partition)
        if self.staged:
            return transaction_segment(self.identity, self.run, target, partition)
        return target


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


class WriteFenced(SegmentStoreError):
    """An attempt found its run aborted by the driver (the fence) and stopped writing."""


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


def _fenced(client: SyncClient, target: str, job: WriteJob) -> bool:
    try:
        return client.get_attribute(target, fence_attribute(job.run)) is not None
    except NoSuchSegment:
        return False


FENCE_CHECK_INTERVAL: Final = 0.2
"""Seconds between a direct write's fence checks (one round trip each): a stray attempt
stops within this of the abort, which the abort's settle wait covers."""


def _stop_if_fenced(client: SyncClient, target: str, job: WriteJob, partition: int) -> None:
    if _fenced(client, target, job):
        raise WriteFenced(
            f"partition {partition}: the driver aborted write {job.identity} (run {job.run}); "
            "this attempt stops"
        )


def write_partition(
    job: WriteJob,
    partition: int,
    attempt: int,
    groups: Callable[[], Iterator[Group]],
    *,
    query_id: str | None = None,
    batch_id: int | None = None,
    client_factory: Callable[[str, Timeouts], SyncClient] | None = None,
) -> PartitionCommit:
    """Write one partition's groups as numbered events; returns its commit message.

    ``groups`` is consumed without encoding when the write was already committed (only
    its rows are counted, for the driver's check of a repeated ``writeId``). An attempt
    of a run the driver has aborted (:func:`~.commit.abort_write` fences it) stops with
    :class:`WriteFenced`: it checks the fence after creating its transaction segment
    (removing it if fenced) and, writing directly to the target, every
    :data:`FENCE_CHECK_INTERVAL` seconds while it writes. Example::

        msg = write_partition(job, ctx.partitionId(), ctx.attemptNumber(),
                              lambda: arrow_groups(batches, job.options, job.schema_json))
    """
    opts = job.options
    target = opts.target_of(partition)
    wid = writer_id(job.identity, target, partition)
    dest = job.destination(partition)
    started = time.monotonic()
    msg = PartitionCommit(
        partition, attempt, target, dest, str(wid), query_id=query_id, batch_id=batch_id
    )
    client = (
        client_factory(opts.endpoint, opts.timeouts)
        if client_factory is not None
        else open_client(opts.endpoint, opts.timeouts, opts.access)
    )
    writer: SyncEventWriter | None = None
    try:
        if _marker_reached(client, target, job):
            msg.skipped = True
            msg.rows = sum(g.rows for g in groups())
            log.info("partition %d: write %s already committed; skipping", partition, job.identity)
            return msg
        _stop_if_fenced(client, target, job, partition)
        if job.staged:
            client.create_segment(dest, exist_ok=True)
            # The driver fences before it deletes: a transaction segment created after
            # its deletion is seen here and removed, so an abort never leaves one behind.
            if _fenced(client, target, job):
                client.delete(dest, missing_ok=True)
                _stop_if_fenced(client, target, job, partition)
        elif opts.create:
            client.create_segment(target, exist_ok=True)
        # Started now to learn what the server holds; events are written with explicit
        # numbers, and the SDK acknowledges those the server has without sending them.
        writer = client.writer(dest, wid).start()
        have = writer.acked_event_number
        msg.resumed_from = max(0, have)
        last_ack = None
        checked = time.monotonic()
        count = 0  # groups this attempt has
        for k, group in enumerate(groups()):
            count = k + 1
            msg.rows += group.rows
            if have >= event_number(k + 1):
                continue  # the server holds the whole group: do not even encode it
            if not job.staged and time.monotonic() - checked >= FENCE_CHECK_INTERVAL:
                _stop_if_fenced(client, target, job, partition)
                checked = time.monotonic()
            for j, (payload, _rows) in enumerate(encode_pieces(group, opts.max_event_bytes)):
                n = event_number(k, j)
                if n <= have:
                    continue  # a piece of a group the server holds part of
                last_ack = writer.write(payload, event_number=n)
                msg.events += 1
                msg.bytes += len(payload)
                msg.last_event_number = n
        if last_ack is not None:
            last_ack.wait(opts.timeout)  # acks come in order: all durable
        if have >= event_number(count):
            # The server holds events of groups this attempt does not have: a commit
            # would report these rows while the target keeps more.
            raise SegmentStoreError(
                f"partition {partition} -> {target} (writer {wid}): the server holds this "
                f"writer's events up to number {have}, beyond this attempt's {count} row "
                f"group(s) ({msg.rows} rows): an earlier attempt or run of this write had more "
                "rows (a non-deterministic input, or a writeId reused with other data); the "
                "target keeps those events, so this write is not committed"
            )
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
