"""A ``foreachPartition`` writer for Spark versions without Python data sources (< 4).

**At-least-once.** ``foreachPartition`` has no commit protocol: nothing on the driver
learns whether every partition finished, nothing cleans up after a failed job, and a job
that is run again (without a ``write_id``) writes everything again. Within one job, a
retried task writes as the same writer with the same event numbers as its failed
attempt (the writer id comes from the write identity drawn when the helper is made, and
the partition id), so task retries of a partition whose rows are deterministic are
de-duplicated by the server; a ``write_id`` extends that to re-runs of the whole job.
Use the ``segmentstore`` data source on Spark 4 for exactly-once writes with commit and
abort.

Rows are encoded as MessagePack (with the schema, when given, in every event's headers),
so the ``segmentstore`` reader reads them back with their Spark types; with
``record_format`` (the data source's ``recordFormat``), each row's ``key, value,
timestamp, headers`` become one record of that format per event instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from .codec import schema_json_of
from .options import DEFAULT_ROWS_PER_EVENT, WriteOptions, write_identity
from .writer import Group, PartitionCommit, WriteJob, row_groups, write_partition


def partition_writer(
    endpoint: str,
    segments: str | Sequence[str],
    *,
    schema: Any = None,
    write_id: str | None = None,
    rows_per_event: int = DEFAULT_ROWS_PER_EVENT,
    compression: str = "none",
    create: bool = True,
    record_format: str | None = None,
) -> Callable[[Iterable[Any]], None]:
    """A function for ``df.foreachPartition`` that writes each partition's rows to
    ``segments`` (partition ``p`` to ``segments[p % n]``). At-least-once; see the module
    docstring.

    ``schema`` (``df.schema``) is stored with the events so readers get the same Spark
    types back. ``record_format`` (``kafka``, ``events``, ``databus``, ``records``) writes
    one record of that format per row, as the data source's ``recordFormat`` does. Example::

        from segmentstore_client.spark.foreach import partition_writer
        df.foreachPartition(partition_writer("tcp://10.0.0.5:12345", "orders/0",
                                             schema=df.schema, write_id="orders-may"))
    """
    names = segments if isinstance(segments, str) else ",".join(segments)
    options = WriteOptions.parse(
        {
            "endpoint": endpoint,
            "segments": names,
            "encoding": "msgpack",
            "rows_per_event": str(rows_per_event),
            "compression": compression,
            "create": str(create).lower(),
            **({"write_id": write_id} if write_id is not None else {}),
            **({"recordFormat": record_format} if record_format is not None else {}),
        }
    )
    identity = write_identity(write_id)  # drawn once here, on the driver
    schema_json = schema_json_of(schema) if schema is not None else ""
    job = WriteJob(options, identity, schema_json)
    codec = "none" if compression == "none" else compression

    def write(rows: Iterable[Any]) -> None:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is None:
            raise RuntimeError("partition_writer's function must run inside a Spark task")

        def groups() -> Iterator[Group]:
            if options.record_format is not None:
                from .record_formats import format_row_groups

                return format_row_groups(rows, options.record_format)
            return row_groups(rows, options.rows_per_event, schema_json, codec)

        result: PartitionCommit = write_partition(
            job,
            ctx.partitionId(),
            ctx.attemptNumber(),
            groups,
        )
        del result

    return write
