"""The ``segmentstore`` data source (Spark 4's Python Data Source API).

Spark 4 registers it by itself when the package is installed (``pyspark_segmentstore``);
otherwise register it once per session with :func:`segmentstore_client.spark.register`::

    (df.write.format("segmentstore")
       .option("endpoint", "tcp://127.0.0.1:12345")
       .option("segment", "orders/0")
       .option("writeId", "orders-2024-05-01")    # makes driver retries idempotent
       .mode("append").save())                     # or "overwrite" (atomic replace)

    spark.read.format("segmentstore").option("endpoint", ...).option("segment", ...).load()

Options are the rows of :data:`~.option_table.OPTIONS`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from ..errors import SegmentStoreError
from .codec import schema_json_of, unwritable_column
from .commit import abort_write, commit_write
from .connect import open_client
from .options import OptionError, ReadOptions, WriteOptions, marker_of, write_identity
from .reader import (
    RAW_SCHEMA,
    RECORDS_SCHEMA,
    SegmentStoreReader,
    check_read_schema,
    infer_schema,
    readable_start,
    with_offset_columns,
)
from .stream_read import StreamCutStreamReader
from .stream_write import (
    StreamJob,
    TxnCommit,
    abort_stream_write,
    commit_stream_write,
    prepare_stream,
    write_stream_partition,
)
from .streaming import SegmentStoreStreamReader, SegmentStoreStreamWriter, StreamTxnSink
from .writer import PartitionCommit, WriteAborted, WriteJob, arrow_groups, write_partition

FORMAT_NAME = "segmentstore"


def prepare_targets(options: WriteOptions) -> list[str]:
    """On the driver, before any task: create the target segments (``create``, the
    default) or check that they exist, so a wrong endpoint or name fails the write early.
    Returns the targets that already hold data (for ``saveMode``)."""
    client = open_client(options.endpoint, options.timeouts, options.access)
    busy: list[str] = []
    try:
        for seg in options.segments:
            if options.create:
                client.create_segment(seg, exist_ok=True)
            info = client.segment_info(seg)
            if info.length > readable_start(client, seg, info):
                busy.append(seg)
    finally:
        client.close()
    return busy


def _check_writable(schema: StructType) -> None:
    """Refuse, on the driver and before any target is made, a column no worker can send."""
    why = unwritable_column(schema)
    if why is not None:
        raise SegmentStoreError(why)


def select_columns(schema: StructType, columns: tuple[str, ...] | None) -> StructType:
    """``schema`` reduced to ``columns`` (in that order; names case-insensitive)."""
    if columns is None:
        return schema
    by_name = {f.name.lower(): f for f in schema.fields}
    missing = [c for c in columns if c.lower() not in by_name]
    if missing:
        raise OptionError(
            f"option 'columns': {', '.join(map(repr, missing))} not in the data "
            f"(columns: {', '.join(schema.names)})"
        )
    return StructType([by_name[c.lower()] for c in columns])


class SegmentStoreWriter(DataSourceArrowWriter):  # type: ignore[misc]
    """The batch writer: one pickled instance runs every task of one write.

    Spark makes it with ``SegmentStoreDataSource.writer``; directly::

        w = SegmentStoreDataSource({"endpoint": ep, "segment": "s"}).writer(schema, False)
    """

    def __init__(self, job: WriteJob) -> None:
        self.job = job

    def write(self, iterator: Iterator[Any]) -> PartitionCommit:
        """Write this task's partition (exactly once across attempts)."""
        ctx = TaskContext.get()
        if ctx is None:
            raise SegmentStoreError("the segmentstore writer must run inside a Spark task")
        job = self.job
        if job.ignore:  # saveMode=ignore and a target holds data: write nothing
            target = job.options.target_of(ctx.partitionId())
            return PartitionCommit(ctx.partitionId(), ctx.attemptNumber(), target, target, "")
        return write_partition(
            job,
            ctx.partitionId(),
            ctx.attemptNumber(),
            lambda: arrow_groups(iterator, job.options, job.schema_json),
        )

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """All tasks succeeded: set the commit marker, merge transactions (``atomic``)."""
        if not self.job.ignore:
            commit_write(self.job, messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """A task failed for good: clean up (``atomic``) or report what is left; raises
        :class:`WriteAborted` carrying the report (Spark attaches it to the failure)."""
        report = abort_write(self.job, messages)
        raise WriteAborted(str(report))


class StreamTxnWriter(DataSourceArrowWriter):  # type: ignore[misc]
    """The batch writer to a stream: a transaction per task attempt, committed on the
    driver (see :mod:`.stream_write`)."""

    def __init__(self, job: StreamJob) -> None:
        self.job = job

    def write(self, iterator: Iterator[Any]) -> TxnCommit:
        """Write this task's rows into a new transaction of the stream."""
        ctx = TaskContext.get()
        if ctx is None:
            raise SegmentStoreError("the segmentstore writer must run inside a Spark task")
        return write_stream_partition(self.job, ctx.partitionId(), ctx.attemptNumber(), iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Commit every partition's transaction (then the ``writeId`` marker)."""
        commit_stream_write(self.job, messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Abort the reported transactions; raises :class:`WriteAborted` with the report."""
        raise WriteAborted(abort_stream_write(self.job, messages))


def stream_write_job(opts: WriteOptions, schema: StructType, overwrite: bool) -> StreamJob:
    """The job of a batch write to a stream (append only: see the README)."""
    if overwrite or opts.save_mode != "append":
        raise OptionError(
            "a stream is appended to: .mode('append') without saveMode (overwrite, "
            "errorifexists and ignore are for segments)"
        )
    if opts.atomic:
        raise OptionError("option 'atomic' is for segments; stream writes are transactions")
    scope = seq = None
    if opts.write_id is not None:
        identity = write_identity(opts.write_id, opts.write_version)
        scope, seq = marker_of(opts.write_id, opts.write_version, identity)
    prepare_stream(opts, marker=scope is not None)
    return StreamJob(opts, schema_json_of(schema), scope, seq or 0)


class SegmentStoreDataSource(DataSource):  # type: ignore[misc]
    """``format("segmentstore")``: batch and streaming reads and writes of segments.

    Example::

        from segmentstore_client.spark import SegmentStoreDataSource
        spark.dataSource.register(SegmentStoreDataSource)
        df = (spark.read.format("segmentstore")
                .option("endpoint", "tcp://127.0.0.1:12345")
                .option("segment", "orders/0").load())
    """

    @classmethod
    def name(cls) -> str:
        """The format name: ``segmentstore``."""
        return FORMAT_NAME

    def schema(self) -> StructType | str:
        """The read schema when none is given: fixed for ``raw``/``records``, the
        ``schema`` option's DDL, or the Spark schema stored with the first event; only
        the ``columns`` when that option is given (column pruning)."""
        opts = ReadOptions.parse(self.options)
        if opts.output == "raw":
            return select_columns(RAW_SCHEMA, opts.columns)
        if opts.output == "records" and opts.record_format:
            from .record_formats import FORMAT_RECORDS_SCHEMA

            return select_columns(FORMAT_RECORDS_SCHEMA, opts.columns)
        if opts.output == "records":
            return select_columns(RECORDS_SCHEMA, opts.columns)
        if opts.schema_ddl:
            if opts.columns is not None:
                raise OptionError("give either 'schema' or 'columns', not both")
            extra = ", _segment STRING NOT NULL, _offset BIGINT NOT NULL"
            extra += ", _stream STRING NOT NULL" if opts.stream else ""
            return opts.schema_ddl + (extra if opts.offset_columns else "")
        schema = select_columns(infer_schema(opts), opts.columns)
        if opts.offset_columns:
            schema = with_offset_columns(schema, opts.stream is not None)
        # Spark pickles this instance after schema() and calls reader() on the copy: a
        # read with this very schema needs no second look at the data to check it.
        self._inferred = schema.json()
        return schema

    def reader(self, schema: StructType) -> SegmentStoreReader:
        """The batch reader; a read schema that would lose information on a column the
        data holds fails here, on the driver, before any task starts."""
        opts = ReadOptions.parse(self.options)
        if getattr(self, "_inferred", None) != schema.json():
            check_read_schema(opts, schema)
        if opts.filter_pushdown:
            from .pushdown import PushdownReader

            return PushdownReader(opts, schema)
        return SegmentStoreReader(opts, schema)

    def writer(self, schema: StructType, overwrite: bool) -> SegmentStoreWriter | StreamTxnWriter:
        """The batch writer of one run of a write (identity and run fixed here, on the
        driver). ``mode("overwrite")`` stages the write and replaces the targets'
        contents atomically on commit (see :mod:`.commit`)."""
        opts = WriteOptions.parse(self.options)
        _check_writable(schema)
        if opts.stream is not None:
            return StreamTxnWriter(stream_write_job(opts, schema, overwrite))
        if overwrite and opts.save_mode != "append":
            raise OptionError("saveMode applies to .mode('append') writes, not to overwrite")
        busy = prepare_targets(opts)
        if busy and opts.save_mode == "error":
            raise SegmentStoreError(
                f"target {busy[0]!r} already holds data (saveMode errorifexists); use "
                "saveMode ignore, .mode('append') or .mode('overwrite')"
            )
        identity = write_identity(opts.write_id, opts.write_version)
        scope, seq = marker_of(opts.write_id, opts.write_version, identity)
        job = WriteJob(
            opts,
            identity,
            schema_json_of(schema),
            scope if opts.write_id is not None else None,
            seq,
            overwrite=overwrite,
            ignore=bool(busy) and opts.save_mode == "ignore",
        )
        return SegmentStoreWriter(job)

    def streamWriter(
        self, schema: StructType, overwrite: bool
    ) -> SegmentStoreStreamWriter | StreamTxnSink:
        """The streaming sink (exactly once per micro-batch)."""
        if overwrite:
            raise OptionError("the segmentstore sink appends; use outputMode('append')")
        opts = WriteOptions.parse(self.options)
        _check_writable(schema)
        if opts.save_mode != "append":
            raise OptionError("saveMode applies to batch writes; a streaming sink appends")
        if opts.stream is not None:
            if opts.atomic or opts.write_id is not None:
                raise OptionError("a streaming sink to a stream takes no 'atomic' or 'writeId'")
            prepare_stream(opts, marker=True)
            return StreamTxnSink(opts, schema_json_of(schema))
        prepare_targets(opts)
        return SegmentStoreStreamWriter(opts, schema_json_of(schema))

    def streamReader(self, schema: StructType) -> SegmentStoreStreamReader | StreamCutStreamReader:
        """The streaming source (tails the segments, or a stream by stream cuts)."""
        opts = ReadOptions.parse(self.options)
        if opts.stream is not None:
            if opts.start_cut or opts.end_cut or opts.max_bytes_per_trigger is not None:
                raise OptionError(
                    "a streaming read of a stream starts at 'startingOffsets' (earliest, "
                    "latest or a stream cut) and reads to the tail; the stream cut and "
                    "maxBytesPerTrigger options are not for it"
                )
            return StreamCutStreamReader(opts, schema)
        return SegmentStoreStreamReader(opts, schema, opts.max_bytes_per_trigger)
