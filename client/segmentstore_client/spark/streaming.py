"""Structured Streaming: ``writeStream.format("segmentstore")`` and ``readStream``.

Sink: every micro-batch is a write whose identity is ``(query id, batch id)``, both read
from the task's local properties that Spark sets for streaming (``sql.streaming.queryId``
is the query's id, stable across restarts from the same checkpoint;
``streaming.sql.batchId`` the micro-batch). A batch replayed after a failure or a restart
runs with the same identity, so its partitions write as the same writers with the same
event numbers and the server keeps each event once. On commit the sink raises the query's
commit marker on the targets to the batch id; tasks of a batch at or below the marker
write nothing.

Source: offsets are ``{segment: byte offset}`` (event boundaries), checkpointed by Spark.
Each micro-batch reads, per segment, the events between the previous end and the
segment's length when the batch was planned; ``max_bytes_per_trigger`` caps a batch
(snapped to event boundaries, at least one event per segment that has data).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from typing import Any, Final

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamReader, WriterCommitMessage

try:  # Spark >= 4.2: read limits and trigger(availableNow=True) for Python sources
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxBytes,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - Spark 4.0/4.1 never pass a read limit

    class ReadLimit:  # type: ignore[no-redef]
        """Stand-in for Spark 4.2's read limit base class."""

    class ReadAllAvailable(ReadLimit):  # type: ignore[no-redef]
        """Stand-in: no limit."""

    class ReadMaxBytes(ReadLimit):  # type: ignore[no-redef]
        """Stand-in: at most ``max_bytes`` per micro-batch."""

        def __init__(self, max_bytes: int) -> None:
            self.max_bytes = max_bytes

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in for Spark 4.2's availableNow mix-in."""


from pyspark.sql.types import StructType

from ..errors import SegmentStoreError
from .commit import abort_write, commit_write
from .options import OptionError, ReadOptions, WriteOptions, stream_identity
from .raw import next_boundary
from .reader import EventDecoder, SegmentRange, connect, read_range, readable_start
from .stream_write import (
    StreamJob,
    TxnCommit,
    abort_stream_write,
    commit_stream_write,
    write_stream_partition,
)
from .writer import (
    PartitionCommit,
    WriteAborted,
    WriteJob,
    arrow_groups,
    row_groups,
    write_partition,
)

try:  # Spark >= 4.1 hands streaming sinks Arrow batches
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase

    ARROW_STREAM_WRITER: Final = True
except ImportError:  # pragma: no cover - Spark 4.0
    from pyspark.sql.datasource import (  # type: ignore[assignment]
        DataSourceStreamWriter as _StreamWriterBase,
    )

    ARROW_STREAM_WRITER = False  # type: ignore[misc]

log = logging.getLogger("segmentstore_client.spark")

QUERY_ID_PROPERTY: Final = "sql.streaming.queryId"
BATCH_ID_PROPERTY: Final = "streaming.sql.batchId"


def stream_job(
    options: WriteOptions, schema_json: str, query_id: str, batch_id: int, run: uuid.UUID
) -> WriteJob:
    """The write job of one micro-batch (identity and commit marker of the query; ``run``
    is the sink's, drawn on the driver when the query starts)."""
    return WriteJob(
        options,
        stream_identity(query_id, batch_id),
        schema_json,
        marker_scope=f"stream|{query_id}",
        marker_seq=batch_id,
        run=run,
    )


class SegmentStoreStreamWriter(_StreamWriterBase):  # type: ignore[misc,valid-type]
    """The streaming sink: exactly once per micro-batch (see the module docstring).

    Example::

        (stream.writeStream.format("segmentstore").option("endpoint", ep)
            .option("segment", "out/0").option("checkpointLocation", ckpt).start())
    """

    def __init__(self, options: WriteOptions, schema_json: str) -> None:
        self.options = options
        self.schema_json = schema_json
        self.run = uuid.uuid4()

    def write(self, iterator: Iterator[Any]) -> PartitionCommit:
        """Write this task's share of the micro-batch."""
        ctx, query_id, batch_id = _query_and_batch()
        job = stream_job(self.options, self.schema_json, query_id, batch_id, self.run)
        opts = self.options

        def groups() -> Iterator[Any]:
            if ARROW_STREAM_WRITER:
                return arrow_groups(iterator, opts, self.schema_json)
            codec = "none" if opts.compression == "none" else opts.compression
            return row_groups(iterator, opts.rows_per_event, self.schema_json, codec)

        return write_partition(
            job,
            ctx.partitionId(),
            ctx.attemptNumber(),
            groups,
            query_id=query_id,
            batch_id=batch_id,
        )

    def _job(self, messages: list[WriterCommitMessage | None], batch_id: int) -> WriteJob | None:
        for m in messages:
            if isinstance(m, PartitionCommit) and m.query_id:
                return stream_job(self.options, self.schema_json, m.query_id, batch_id, self.run)
        return None

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Commit micro-batch ``batchId``: raise the marker, merge (``atomic``)."""
        job = self._job(messages, batchId)
        if job is None:
            return  # no partition reported: nothing was written
        commit_write(job, messages)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Abort micro-batch ``batchId``; the report says what it left behind. A restart
        from the checkpoint replays the batch with the same identity and completes it."""
        job = self._job(messages, batchId)
        if job is None:
            log.warning(
                "segmentstore streaming batch %d aborted before any task reported; a restart "
                "from the checkpoint replays it with the same identity",
                batchId,
            )
            return
        report = abort_write(job, messages)
        raise WriteAborted(str(report))


def _query_and_batch() -> tuple[Any, str, int]:
    ctx = TaskContext.get()
    if ctx is None:
        raise SegmentStoreError("the streaming sink must run inside a Spark task")
    query_id = ctx.getLocalProperty(QUERY_ID_PROPERTY)
    batch = ctx.getLocalProperty(BATCH_ID_PROPERTY)
    if not query_id or batch is None:
        raise SegmentStoreError(
            "no streaming query id / batch id in the task's properties: the segmentstore "
            "sink supports micro-batch queries (not continuous processing)"
        )
    return ctx, query_id, int(batch)


class StreamTxnSink(_StreamWriterBase):  # type: ignore[misc,valid-type]
    """The streaming sink to a stream: each micro-batch partition writes a transaction,
    committed by the driver once per batch id; a batch at or below the query's marker
    (already committed) writes nothing (see :mod:`.stream_write`).

    Example::

        (df.writeStream.format("segmentstore").option("endpoint", ep)
            .option("stream", "shop/copy").option("checkpointLocation", ckpt).start())
    """

    def __init__(self, options: WriteOptions, schema_json: str) -> None:
        self.options = options
        self.schema_json = schema_json

    def job(self, query_id: str, batch_id: int) -> StreamJob:
        """The job of one micro-batch (the query's marker scope at the batch id)."""
        return StreamJob(self.options, self.schema_json, f"stream|{query_id}", batch_id)

    def write(self, iterator: Iterator[Any]) -> TxnCommit:
        """Write this task's share of the micro-batch into a transaction."""
        if not ARROW_STREAM_WRITER:  # pragma: no cover - Spark 4.0
            raise SegmentStoreError("a streaming sink to a stream needs Spark >= 4.1")
        ctx, query_id, batch_id = _query_and_batch()
        return write_stream_partition(
            self.job(query_id, batch_id),
            ctx.partitionId(),
            ctx.attemptNumber(),
            iterator,
            query_id=query_id,
            batch_id=batch_id,
        )

    def _job_of(self, messages: list[WriterCommitMessage | None], batch_id: int) -> StreamJob:
        for m in messages:
            if isinstance(m, TxnCommit) and m.query_id:
                return self.job(m.query_id, batch_id)
        return StreamJob(self.options, self.schema_json)  # nothing reported: no marker

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Commit micro-batch ``batchId``'s transactions, then raise the marker."""
        commit_stream_write(self._job_of(messages, batchId), messages)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Abort micro-batch ``batchId``'s transactions (a replay writes new ones)."""
        raise WriteAborted(abort_stream_write(self._job_of(messages, batchId), messages))


class SegmentStoreStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    """The streaming source: tails segments; offsets are ``{segment: offset}``.

    Example::

        spark.readStream.format("segmentstore").option("endpoint", ep) \\
            .option("segment", "orders/0").load()
    """

    def __init__(self, options: ReadOptions, schema: StructType, max_bytes: int | None) -> None:
        self.options = options
        self.schema = schema
        self.max_bytes = max_bytes
        self._available_now: dict[str, int] | None = None

    # -- offsets ---------------------------------------------------------------------

    def _lengths(self) -> dict[str, tuple[int, int]]:
        client = connect(self.options)
        try:
            out = {}
            for seg in self.options.segments:
                info = client.segment_info(seg)
                out[seg] = (readable_start(client, seg, info), info.length)
            return out
        finally:
            client.close()

    def initialOffset(self) -> dict[str, int]:
        """Where a new query starts: ``starting_offsets`` (earliest, latest or JSON)."""
        spec = self.options.starting_offsets
        lengths = self._lengths()
        if spec.lower() == "earliest":
            return {seg: start for seg, (start, _) in lengths.items()}
        if spec.lower() == "latest":
            return {seg: length for seg, (_, length) in lengths.items()}
        try:
            given = json.loads(spec)
        except json.JSONDecodeError:
            raise OptionError(
                f"starting_offsets must be earliest, latest or JSON, not {spec!r}"
            ) from None
        if not isinstance(given, dict):
            raise OptionError("starting_offsets JSON must be an object {segment: offset}")
        out = {}
        for seg, (start, _) in lengths.items():
            value = given.get(seg, start)
            if not isinstance(value, int) or value < 0:
                raise OptionError(f"starting offset of {seg!r} must be an integer >= 0")
            out[seg] = max(start, value)
        return out

    def getDefaultReadLimit(self) -> ReadLimit:
        """``max_bytes_per_trigger`` as a Spark read limit (else everything available)."""
        if self.max_bytes is not None:
            return ReadMaxBytes(self.max_bytes)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """``trigger(availableNow=True)``: read up to the lengths of right now."""
        self._available_now = {seg: length for seg, (_, length) in self._lengths().items()}

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, int]:
        """The end of the next micro-batch: each segment's length (or less, by the
        read limit / the availableNow snapshot), at event boundaries. (Spark 4.0/4.1 call
        it without arguments.)"""
        start = start or {}
        lengths = self._lengths()
        out: dict[str, int] = {}
        for seg, (_, length) in lengths.items():
            end = length
            if self._available_now is not None:
                end = min(end, self._available_now.get(seg, end))
            out[seg] = max(end, int(start.get(seg, 0)))
        if isinstance(limit, ReadMaxBytes):
            busy = [s for s in out if out[s] > int(start.get(s, 0))]
            if busy:
                share = max(1, limit.max_bytes // len(busy))
                with connect(self.options) as client:
                    for seg in busy:
                        begin = int(start.get(seg, 0))
                        out[seg] = next_boundary(client, seg, begin, out[seg], share)
        return out

    def reportLatestOffset(self) -> dict[str, int]:
        """The segments' current lengths (for the query's progress report)."""
        return {seg: length for seg, (_, length) in self._lengths().items()}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[SegmentRange]:
        """One partition per segment that has events between ``start`` and ``end``."""
        parts = []
        for seg in self.options.segments:
            a, b = int(start.get(seg, 0)), int(end.get(seg, 0))
            if b > a:
                parts.append(SegmentRange(seg, a, b))
        return parts

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        """The batches of one segment range."""
        decoder = EventDecoder(self.options.output, self.schema, self.options.record_format)
        return read_range(self.options, decoder, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark finished everything up to ``end``; the segments keep their data."""

    def stop(self) -> None:
        """Nothing to release: tasks open and close their own connections."""
