"""Spark integration: the ``segmentstore`` data source (Spark 4 Python Data Source API).

Install with ``pip install segmentstore[spark]`` (pyspark, pyarrow, msgpack) on the driver
and every executor. ``import segmentstore_client`` never imports pyspark; this package
does.

Batch, exactly once (task retries, speculation and, with ``writeId``, driver retries).
Spark 4 registers the format by itself when this package is installed (the
``pyspark_segmentstore`` module); otherwise call ``register(spark)`` once per session::

    from segmentstore_client.spark import register
    register(spark)                       # spark.dataSource.register(SegmentStoreDataSource)

    (df.write.format("segmentstore")
       .option("endpoint", "tcp://127.0.0.1:12345")
       .option("segment", "orders/0")
       .option("writeId", "orders-2024-05-01")
       .mode("append").save())

    back = (spark.read.format("segmentstore")
              .option("endpoint", "tcp://127.0.0.1:12345")
              .option("segment", "orders/0").load())

Streaming, exactly once per micro-batch::

    (spark.readStream.format("segmentstore").option("endpoint", ep)
        .option("segment", "orders/0").load()
        .writeStream.format("segmentstore").option("endpoint", ep)
        .option("segment", "orders-copy/0")
        .option("checkpointLocation", "/tmp/ckpt").start())

Whole streams: ``.option("stream", "scope/stream")`` instead of ``segment`` (batch writes
in controller transactions, with an optional ``routingKeyColumn``; reads between stream
cuts; the streaming source and sink over streams)::

    (df.write.format("segmentstore").option("endpoint", ep)
       .option("stream", "shop/orders").option("routingKeyColumn", "customer")
       .mode("append").save())

Older Spark: :func:`segmentstore_client.spark.foreach.partition_writer` (at-least-once).
"""

from __future__ import annotations

from typing import Any

from .codec import CodecError
from .commit import WriteIdReused, WriteReport
from .foreach import partition_writer
from .options import OptionError, ReadOptions, WriteOptions
from .writer import PartitionCommit, WriteAborted, WriteFenced

try:
    from .datasource import FORMAT_NAME, SegmentStoreDataSource
    from .reader import SegmentRange, SegmentStoreReader
    from .streaming import SegmentStoreStreamReader, SegmentStoreStreamWriter
except ImportError as _e:  # pragma: no cover - Spark < 4 has no Python data sources
    _DATASOURCE_ERROR: ImportError | None = _e
else:
    _DATASOURCE_ERROR = None


def activate(spark: Any) -> None:
    """Make ``spark`` the active session of the calling thread.

    Spark 4 looks up the format of ``df.write`` in the calling thread's *active*
    session; a thread other than the one that built the session has none, and the
    write fails with ``DATA_SOURCE_NOT_FOUND`` (reads are not affected), even for a
    source Spark registered by itself. Call this once in such a thread before writing.

    Example::

        def job():
            activate(spark)
            df.write.format("segmentstore").option(...).mode("append").save()
        threading.Thread(target=job).start()
    """
    spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)


def register(spark: Any) -> None:
    """Register the ``segmentstore`` format with a SparkSession (once per session).

    Example::

        register(spark)
        spark.read.format("segmentstore").option(...).load()
    """
    if _DATASOURCE_ERROR is not None:
        raise ImportError(
            "the segmentstore data source needs Spark 4 (Python Data Source API); on older "
            "Spark use segmentstore_client.spark.foreach.partition_writer"
        ) from _DATASOURCE_ERROR
    spark.dataSource.register(SegmentStoreDataSource)


__all__ = [
    "FORMAT_NAME",
    "CodecError",
    "OptionError",
    "PartitionCommit",
    "ReadOptions",
    "SegmentRange",
    "SegmentStoreDataSource",
    "SegmentStoreReader",
    "SegmentStoreStreamReader",
    "SegmentStoreStreamWriter",
    "WriteAborted",
    "WriteFenced",
    "WriteIdReused",
    "WriteOptions",
    "WriteReport",
    "activate",
    "partition_writer",
    "register",
]
