"""Reading segments into Spark: partition planning, event decoding, schema inference.

A read is cut into :class:`SegmentRange` partitions: one per segment, or, for a segment
larger than ``partition_bytes``, one per offset range whose ends are event boundaries
(found by :func:`~.raw.plan_ranges`). A task reads its range with the SDK's reader and
turns events into Arrow record batches of the query's schema:

* ``output=rows``: events are records written by this integration (Arrow IPC or
  MessagePack rows, told apart by the ``content-type`` header) and become the rows'
  columns, matched by name (missing columns are null); ``offset_columns=true`` adds
  ``_segment`` and ``_offset`` (the event's offset).
* ``output=raw``: one row per event: ``segment, offset, next_offset, data``.
* ``output=records``: one row per event holding a record envelope:
  ``segment, offset, next_offset, key, value, headers, timestamp``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from .. import records
from ..admin import SegmentInfo
from ..errors import CorruptRecord
from ..reader import Event
from ..sync import SyncClient
from .codec import (
    ARROW_CONTENT_TYPE,
    CONTENT_TYPE_HEADER,
    MSGPACK_CONTENT_TYPE,
    SCHEMA_HEADER,
    CodecError,
    RowsToArrow,
    check_lossless,
    conform,
    decode_arrow,
    decode_rows,
    schema_from_json,
    spark_arrow_schema,
    spark_schema_of_arrow,
)
from .connect import open_client
from .options import BASE_ATTRIBUTE, ReadOptions
from .raw import plan_ranges

log = logging.getLogger("segmentstore_client.spark")

READ_SIZE: Final = 4 * 1024 * 1024
MAX_BATCH_BYTES: Final = 64 * 1024 * 1024
""":func:`coalesce` stops joining batches at this many bytes, whatever ``batchRows`` says."""
OFFSET_COLUMNS: Final = ("_segment", "_offset", "_stream")

RAW_SCHEMA: Final = StructType(
    [
        StructField("segment", StringType(), False),
        StructField("offset", LongType(), False),
        StructField("next_offset", LongType(), False),
        StructField("data", BinaryType(), False),
    ]
)
"""Schema of ``output=raw``."""

RECORDS_SCHEMA: Final = StructType(
    [
        StructField("segment", StringType(), False),
        StructField("offset", LongType(), False),
        StructField("next_offset", LongType(), False),
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), False),
        StructField("headers", MapType(StringType(), BinaryType(), False), False),
        StructField("timestamp", TimestampType(), False),
    ]
)
"""Schema of ``output=records``."""


@dataclass
class SegmentRange(InputPartition):  # type: ignore[misc]
    """One read task: events of ``segment`` whose records start in ``[start, end)``.

    Example::

        SegmentRange("orders/0", 0, 16 << 20)
    """

    segment: str
    start: int
    end: int


def with_offset_columns(schema: StructType, stream: bool = False) -> StructType:
    """``schema`` plus the ``_segment`` and ``_offset`` columns (and ``_stream`` for a
    stream read), if not already there."""
    fields = [f for f in schema.fields if f.name not in OFFSET_COLUMNS]
    extra = [
        StructField("_segment", StringType(), False),
        StructField("_offset", LongType(), False),
    ]
    if stream:
        extra.append(StructField("_stream", StringType(), False))
    return StructType([*fields, *extra])


def connect(options: ReadOptions) -> SyncClient:
    """A blocking SDK client for ``options.endpoint``, bounded by the read's timeouts."""
    return open_client(options.endpoint, options.timeouts, options.access)


# --- decoding ----------------------------------------------------------------------------


class EventDecoder:
    """Turns a run of events of one segment into Arrow batches of the read schema.

    Example::

        dec = EventDecoder("rows", schema)
        for batch in dec.decode("orders/0", events): ...
    """

    def __init__(
        self,
        output: str,
        schema: StructType,
        record_format: str | None = None,
        stream: str | None = None,
    ) -> None:
        self.output = output
        self.stream = stream or ""
        self.record_format = record_format
        self.schema = schema
        self.target = spark_arrow_schema(schema)
        # Offset columns are filled wherever the read schema has them (offset_columns=true
        # adds them to inferred and DDL schemas); the rest is the rows' own columns.
        names = schema.names
        self._extra = [n for n in OFFSET_COLUMNS if n in names] if output == "rows" else []
        self.data_schema = StructType([f for f in schema.fields if f.name not in self._extra])
        self.data_target = spark_arrow_schema(self.data_schema)
        self._columns = frozenset(n.lower() for n in self.data_schema.names)
        self._msgpack: dict[bytes, RowsToArrow] = {}

    def decode(self, segment: str, events: Sequence[Event]) -> Iterator[pa.RecordBatch]:
        """Batches for ``events`` (consecutive events of ``segment``)."""
        if not events:
            return
        if self.output == "raw":
            yield self._raw(segment, events)
        elif self.output == "records" and self.record_format:
            from .record_formats import format_batch

            yield format_batch(self.record_format, segment, events, self.target)
        elif self.output == "records":
            yield self._records(segment, events)
        else:
            for e in events:
                yield from self._rows(segment, e)

    def _raw(self, segment: str, events: Sequence[Event]) -> pa.RecordBatch:
        n = len(events)
        cols = [
            pa.array([segment] * n, pa.string()),
            pa.array([e.offset for e in events], pa.int64()),
            pa.array([e.next_offset for e in events], pa.int64()),
            pa.array([e.data for e in events], pa.binary()),
        ]
        raw = spark_arrow_schema(RAW_SCHEMA)
        return conform(pa.RecordBatch.from_arrays(cols, schema=raw), self.target)

    def _records(self, segment: str, events: Sequence[Event]) -> pa.RecordBatch:
        decoded = [_decode_record(segment, e) for e in events]
        n = len(events)
        schema = spark_arrow_schema(RECORDS_SCHEMA)
        cols = [
            pa.array([segment] * n, pa.string()),
            pa.array([e.offset for e in events], pa.int64()),
            pa.array([e.next_offset for e in events], pa.int64()),
            pa.array([r.key for r in decoded], pa.binary()),
            pa.array([r.value for r in decoded], pa.binary()),
            pa.array([list(r.headers.items()) for r in decoded], schema.field("headers").type),
            pa.array([(r.timestamp_ns or 0) // 1000 for r in decoded], pa.int64()).cast(
                schema.field("timestamp").type
            ),
        ]
        return conform(pa.RecordBatch.from_arrays(cols, schema=schema), self.target)

    def _rows(self, segment: str, event: Event) -> Iterator[pa.RecordBatch]:
        rec = _decode_record(segment, event)
        ctype = rec.headers.get(CONTENT_TYPE_HEADER, b"").decode("utf-8", "replace")
        try:
            if ctype == ARROW_CONTENT_TYPE:
                _, batches = decode_arrow(rec.value, self._columns)
                out = [conform(b, self.data_target) for b in batches]
            elif ctype == MSGPACK_CONTENT_TYPE:
                out = [self._rows_builder(rec.headers.get(SCHEMA_HEADER))(decode_rows(rec.value))]
            else:
                raise CodecError(
                    f"content-type {ctype!r} is not rows written by the Spark integration "
                    "(read it with .option('output', 'records') or 'raw')"
                )
        except CodecError as e:
            raise CodecError(f"segment {segment!r}, event at offset {event.offset}: {e}") from e
        for b in out:
            if self._extra:
                b = self._with_offsets(b, segment, event.offset)
            yield b

    def _with_offsets(self, b: pa.RecordBatch, segment: str, offset: int) -> pa.RecordBatch:
        n = b.num_rows
        cols = []
        data = iter(b.columns)
        for f in self.target:
            if f.name == "_segment" and "_segment" in self._extra:
                cols.append(pa.array([segment] * n, f.type))
            elif f.name == "_offset" and "_offset" in self._extra:
                cols.append(pa.array([offset] * n, f.type))
            elif f.name == "_stream" and "_stream" in self._extra:
                cols.append(pa.array([self.stream] * n, f.type))
            else:
                cols.append(next(data))
        return pa.RecordBatch.from_arrays(cols, schema=self.target)

    def _rows_builder(self, schema_header: bytes | None) -> RowsToArrow:
        key = schema_header or b""
        build = self._msgpack.get(key)
        if build is None:
            names = None
            if key:
                written = schema_from_json(key.decode())
                check_lossless(spark_arrow_schema(written), self.data_target)
                names = written.names
            build = self._msgpack[key] = RowsToArrow(self.data_schema, names)
        return build


def _decode_record(segment: str, event: Event) -> records.Record:
    data = event.data
    if len(data) < records.OVERHEAD or data[0] != records.FORMAT_VERSION:
        # Not even a record's first byte: events written by something else, not damage.
        raise CorruptRecord(
            f"segment {segment!r} holds raw events (the event at offset {event.offset} is "
            "not a record); read it with .option('output', 'raw')"
        )
    try:
        return records.decode(data)
    except CorruptRecord as e:
        raise CorruptRecord(
            f"segment {segment!r}, event at offset {event.offset}: {e} "
            "(if the segment holds raw events, read it with .option('output', 'raw'))"
        ) from e


def read_range(
    options: ReadOptions, decoder: EventDecoder, part: SegmentRange
) -> Iterator[pa.RecordBatch]:
    """The batches of one :class:`SegmentRange` (what a read task yields).

    Example::

        for batch in read_range(options, decoder, SegmentRange("orders/0", 0, 4096)): ...
    """
    if not isinstance(part, SegmentRange) or part.end <= part.start:
        return  # Spark hands over a placeholder partition when none were planned
    yield from coalesce(_range_batches(options, decoder, part), options.batch_rows)


def coalesce(batches: Iterable[pa.RecordBatch], rows: int) -> Iterator[pa.RecordBatch]:
    """``batches`` (of one schema) joined into batches of at least ``rows`` rows or
    :data:`MAX_BATCH_BYTES` bytes (the last one may be smaller), in order. Spark pays a
    fixed cost per Arrow batch a Python source hands over, so events written with a
    small ``rowsPerEvent`` are joined; batches of 10,000 rows (the default
    ``rowsPerEvent``) already cost no more CPU per read than joined ones of 131,072.

    Example::

        [b.num_rows for b in coalesce([b1000, b1000, b500], 2000)]  # [2000, 500]
    """
    pending: list[pa.RecordBatch] = []
    count = size = 0
    for b in batches:
        if not b.num_rows:
            continue
        pending.append(b)
        count += b.num_rows
        size += b.nbytes
        if count >= rows or size >= MAX_BATCH_BYTES:
            yield pending[0] if len(pending) == 1 else pa.concat_batches(pending)
            pending.clear()
            count = size = 0
    if pending:
        yield pending[0] if len(pending) == 1 else pa.concat_batches(pending)


def _range_batches(
    options: ReadOptions, decoder: EventDecoder, part: SegmentRange
) -> Iterator[pa.RecordBatch]:
    client = connect(options)
    try:
        reader = client.reader(part.segment, part.start, read_size=READ_SIZE)
        try:
            # Every pass consumes at least one event and offsets only grow, so the loop
            # ends at part.end or where the segment ended when the reader got there.
            while True:
                events = reader.read_batch()
                if not events:
                    return
                if events[-1].offset >= part.end:
                    events = [e for e in events if e.offset < part.end]
                    yield from decoder.decode(part.segment, events)
                    return
                yield from decoder.decode(part.segment, events)
                if events[-1].next_offset >= part.end:
                    return
        finally:
            reader.close()
    finally:
        client.close()


# --- planning ----------------------------------------------------------------------------


MIN_PARTITION_BYTES: Final = 1 << 20
"""``minPartitions`` never cuts pieces smaller than this (a task has fixed costs)."""


def readable_start(client: SyncClient, segment: str, info: SegmentInfo) -> int:
    """Where a segment's current contents start: its start offset, or the base an
    overwrite set atomically with merging the new contents (see :mod:`.commit`)."""
    base = client.get_attribute(segment, BASE_ATTRIBUTE)
    if base is not None and not 0 <= base <= info.length:
        # An overwrite sets the base atomically with merging the new contents, so it is
        # never past the end: a value outside [0, length] is damage, not an empty segment.
        raise CorruptRecord(
            f"segment {segment!r}: its overwrite base {base} lies outside [0, {info.length}] "
            "(a damaged attribute; nothing was read)"
        )
    return max(info.start_offset, base or 0)


Span = tuple[str, int, int]
"""``(segment, start offset, end offset)``: what a read covers of one segment."""


def segment_spans(options: ReadOptions, client: SyncClient) -> list[Span]:
    """The readable range of every segment of a read (or of every segment of its stream
    between its stream cuts, see :mod:`.stream_read`)."""
    if options.stream is not None:
        from .stream_read import stream_spans

        return stream_spans(options)
    spans: list[Span] = []
    for seg in options.segments:
        info = client.segment_info(seg)
        start = max(readable_start(client, seg, info), options.start_offset or 0)
        end = info.length if options.end_offset is None else min(info.length, options.end_offset)
        if end > start:
            spans.append((seg, start, end))
    return spans


def cut_spans(
    options: ReadOptions, spans: list[Span], client: SyncClient | None = None
) -> list[SegmentRange]:
    """``spans`` cut at event boundaries into pieces of at most ``partitionBytes``, and
    small enough that there are at least ``minPartitions`` of them when the data allows
    (pieces of at least 1 MiB)."""
    total = sum(end - start for _, start, end in spans)
    piece = min(
        options.partition_bytes,
        max(MIN_PARTITION_BYTES, -(-total // options.min_partitions)),
    )
    parts: list[SegmentRange] = []
    own = client is None and any(end - start > piece for _, start, end in spans)
    if own:
        client = connect(options)
    try:
        for seg, start, end in spans:
            if end - start <= piece or client is None:
                parts.append(SegmentRange(seg, start, end))
                continue
            for a, b in plan_ranges(client, seg, start, end, piece):
                parts.append(SegmentRange(seg, a, b))
    finally:
        if own and client is not None:
            client.close()
    return parts


def plan_partitions(options: ReadOptions) -> list[SegmentRange]:
    """The read's partitions: each segment's readable range (:func:`segment_spans`), cut
    by :func:`cut_spans`.

    Example::

        plan_partitions(ReadOptions.parse({"endpoint": ep, "segment": "s"}))
    """
    client = connect(options)
    try:
        return cut_spans(options, segment_spans(options, client), client)
    finally:
        client.close()


def infer_schema(options: ReadOptions) -> StructType:
    """The schema of ``output=rows``: the Spark schema stored with the first event of
    the first non-empty segment. Raises :class:`CodecError` when there is nothing to
    infer from.

    Example::

        infer_schema(ReadOptions.parse({"endpoint": ep, "segment": "s"}))
    """
    client = connect(options)
    try:
        for seg, start, _end in segment_spans(options, client):
            reader = client.reader(seg, start, read_size=64 * 1024)
            try:
                events = reader.read_batch()
            finally:
                reader.close()
            if not events:
                continue
            return schema_of_event(seg, events[0])
    finally:
        client.close()
    what = options.stream or ", ".join(options.segments)
    raise CodecError(
        f"cannot infer a schema: {what} hold no events; give one "
        "with spark.read.schema(...) or .option('schema', 'a INT, b STRING')"
    )


def check_read_schema(options: ReadOptions, schema: StructType) -> None:
    """Raise :class:`CodecError` naming the first column of ``schema`` (a rows read)
    that the data, as its first event describes it, holds with a type it cannot be read
    as without losing information. Nothing to compare with (no events): no check here;
    the tasks check every event anyway."""
    if options.output != "rows":
        return
    try:
        written = infer_schema(options)
    except CodecError:
        return
    data = StructType([f for f in schema.fields if f.name not in OFFSET_COLUMNS])
    check_lossless(spark_arrow_schema(written), spark_arrow_schema(data))


def schema_of_event(segment: str, event: Event) -> StructType:
    """The Spark schema an event written by this integration carries."""
    rec = _decode_record(segment, event)
    ctype = rec.headers.get(CONTENT_TYPE_HEADER, b"").decode("utf-8", "replace")
    if ctype == ARROW_CONTENT_TYPE:
        arrow_schema, _ = decode_arrow(rec.value)
        found = spark_schema_of_arrow(arrow_schema)
        return found if found is not None else from_arrow_schema(arrow_schema)
    header = rec.headers.get(SCHEMA_HEADER)
    if ctype == MSGPACK_CONTENT_TYPE and header:
        return schema_from_json(header.decode())
    raise CodecError(
        f"segment {segment!r}: the event at offset {event.offset} carries no schema "
        f"(content-type {ctype!r}); give one with spark.read.schema(...)"
    )


class SegmentStoreReader(DataSourceReader):  # type: ignore[misc]
    """The batch reader Spark gets from ``spark.read.format("segmentstore")``.

    Example::

        reader = SegmentStoreReader(ReadOptions.parse(opts), schema)
        batches = [b for p in reader.partitions() for b in reader.read(p)]
    """

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> list[SegmentRange]:
        """One partition per segment or per offset range of a large segment."""
        return plan_partitions(self.options)

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        """Arrow batches of one partition."""
        opts = self.options
        decoder = EventDecoder(opts.output, self.schema, opts.record_format, opts.stream)
        return read_range(opts, decoder, partition)
