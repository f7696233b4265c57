"""The ``segmentstore`` data source (Spark 4's Python Data Source API).

Register it once per session with :func:`segmentstore_client.spark.register`, then::

    (df.write.format("segmentstore")
       .option("endpoint", "tcp://127.0.0.1:12345")
       .option("segment", "orders/0")
       .option("write_id", "orders-2024-05-01")   # makes driver retries idempotent
       .mode("append").save())

    spark.read.format("segmentstore").option("endpoint", ...).option("segment", ...).load()

Options are documented on :class:`~.options.WriteOptions` and
:class:`~.options.ReadOptions`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from ..errors import SegmentStoreError
from .codec import schema_json_of
from .options import OptionError, ReadOptions, WriteOptions, write_identity
from .reader import (
    RAW_SCHEMA,
    RECORDS_SCHEMA,
    SegmentStoreReader,
    infer_schema,
    with_offset_columns,
)
from .streaming import SegmentStoreStreamReader, SegmentStoreStreamWriter
from .writer import (
    PartitionCommit,
    WriteAborted,
    WriteJob,
    abort_write,
    arrow_groups,
    commit_write,
    write_partition,
)

FORMAT_NAME = "segmentstore"


def prepare_targets(options: WriteOptions) -> None:
    """On the driver, before any task: create the target segments (``create``, the
    default) or check that they exist, so a wrong endpoint or name fails the write early."""
    from ..sync import connect as sync_connect

    client = sync_connect(options.endpoint)
    try:
        for seg in options.segments:
            if options.create:
                client.create_segment(seg, exist_ok=True)
            else:
                client.segment_info(seg)
    finally:
        client.close()


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
        return write_partition(
            job,
            ctx.partitionId(),
            ctx.attemptNumber(),
            lambda: arrow_groups(iterator, job.options, job.schema_json),
        )

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """All tasks succeeded: set the commit marker, merge transactions (``atomic``)."""
        commit_write(self.job, messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """A task failed for good: clean up (``atomic``) or report what is left; raises
        :class:`WriteAborted` carrying the report (Spark attaches it to the failure)."""
        report = abort_write(self.job, messages)
        raise WriteAborted(str(report))


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
        ``schema`` option's DDL, or the Spark schema stored with the first event."""
        opts = ReadOptions.parse(self.options)
        if opts.output == "raw":
            return RAW_SCHEMA
        if opts.output == "records" and opts.record_format:
            from .record_formats import FORMAT_RECORDS_SCHEMA

            return FORMAT_RECORDS_SCHEMA
        if opts.output == "records":
            return RECORDS_SCHEMA
        if opts.schema_ddl:
            extra = ", _segment STRING NOT NULL, _offset BIGINT NOT NULL"
            return opts.schema_ddl + (extra if opts.offset_columns else "")
        inferred = infer_schema(opts)
        return with_offset_columns(inferred) if opts.offset_columns else inferred

    def reader(self, schema: StructType) -> SegmentStoreReader:
        """The batch reader."""
        return SegmentStoreReader(ReadOptions.parse(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> SegmentStoreWriter:
        """The batch writer of one write (its identity is fixed here, on the driver)."""
        if overwrite:
            raise OptionError("the segmentstore sink appends; use .mode('append')")
        opts = WriteOptions.parse(self.options)
        prepare_targets(opts)
        identity = write_identity(opts.write_id)
        scope = f"write|{identity}" if opts.write_id is not None else None
        return SegmentStoreWriter(WriteJob(opts, identity, schema_json_of(schema), scope, 0))

    def streamWriter(self, schema: StructType, overwrite: bool) -> SegmentStoreStreamWriter:
        """The streaming sink (exactly once per micro-batch)."""
        if overwrite:
            raise OptionError("the segmentstore sink appends; use outputMode('append')")
        opts = WriteOptions.parse(self.options)
        prepare_targets(opts)
        return SegmentStoreStreamWriter(opts, schema_json_of(schema))

    def streamReader(self, schema: StructType) -> SegmentStoreStreamReader:
        """The streaming source (tails the segments)."""
        opts = ReadOptions.parse(self.options)
        return SegmentStoreStreamReader(opts, schema, opts.max_bytes_per_trigger)
