"""The ``recordFormat`` option: Spark rows as records of an exact format (Kafka 0.10
messages, namespaced events, Databus events, the SDK's records), one record per event.

Contract: reads (``output=records`` with ``recordFormat``) yield ``segment, offset,
next_offset, key, value, headers, timestamp`` per event, the record decoded by the named
format of :mod:`segmentstore_client.formats` and mapped by its ``columns`` (key, value,
timestamp in ms, headers; value and timestamp may be null, unlike the plain ``records``
output). Writes take the same four columns (any of them may be missing; ``value`` may be
binary or string; ``timestamp`` a timestamp or milliseconds) and encode each row as one
event with the format's ``encode_columns``, so ``rows_per_event`` is 1. A damaged event
raises the format's named error with its segment and offset.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final

import pyarrow as pa
from pyspark.sql.types import StructField, StructType

from .. import formats
from ..errors import CorruptRecord
from ..reader import Event
from .codec import conform, spark_arrow_schema
from .reader import RECORDS_SCHEMA
from .writer import Group

FORMAT_RECORDS_SCHEMA: Final = StructType(
    [
        StructField(f.name, f.dataType, f.nullable or f.name in ("value", "timestamp"))
        for f in RECORDS_SCHEMA.fields
    ]
)
"""Schema of ``output=records`` with ``recordFormat``."""


def format_batch(
    fmt_name: str, segment: str, events: Sequence[Event], target: pa.Schema
) -> pa.RecordBatch:
    """One Arrow batch of decoded records for ``events`` (consecutive, one segment)."""
    fmt = formats.get(fmt_name)
    cols = []
    for e in events:
        try:
            cols.append(fmt.columns(fmt.decode(e.data)))
        except CorruptRecord as err:
            raise type(err)(f"segment {segment!r}, event at offset {e.offset}: {err}") from err
    schema = spark_arrow_schema(FORMAT_RECORDS_SCHEMA)
    n = len(events)
    arrays = [
        pa.array([segment] * n, pa.string()),
        pa.array([e.offset for e in events], pa.int64()),
        pa.array([e.next_offset for e in events], pa.int64()),
        pa.array([c.key for c in cols], pa.binary()),
        pa.array([c.value for c in cols], pa.binary()),
        pa.array([list(c.headers.items()) for c in cols], schema.field("headers").type),
        pa.array(
            [None if c.timestamp is None else c.timestamp * 1000 for c in cols], pa.int64()
        ).cast(schema.field("timestamp").type),
    ]
    return conform(pa.RecordBatch.from_arrays(arrays, schema=schema), target)


class FormatGroup(Group):
    """One row, encoded as one record of the format."""

    __slots__ = ("_payload",)

    def __init__(self, payload: bytes) -> None:
        super().__init__(1)
        self._payload = payload

    def encode(self, start: int, count: int) -> bytes:
        return self._payload


def _column(batch: pa.RecordBatch, name: str) -> list[Any]:
    i = batch.schema.get_field_index(name)
    if i < 0:
        return [None] * batch.num_rows
    col = batch.column(i)
    if name == "timestamp" and pa.types.is_timestamp(col.type):
        micros = col.cast(pa.timestamp("us", tz=col.type.tz)).cast(pa.int64())
        return [None if v is None else v // 1000 for v in micros.to_pylist()]
    values: list[Any] = col.to_pylist()
    return values


def _bytes(v: Any) -> bytes | None:
    return v.encode() if isinstance(v, str) else v


def _encode(fmt: Any, k: Any, v: Any, t: Any, h: Any) -> FormatGroup:
    hd = {str(n): _bytes(x) or b"" for n, x in (h.items() if isinstance(h, dict) else h or [])}
    row = formats.Columns(_bytes(k), _bytes(v), None if t is None else int(t), hd)
    return FormatGroup(fmt.encode_columns(row))


def format_groups(batches: Iterable[pa.RecordBatch], fmt_name: str) -> Iterator[Group]:
    """One :class:`FormatGroup` per row of ``batches``."""
    fmt = formats.get(fmt_name)
    for b in batches:
        keys, values = _column(b, "key"), _column(b, "value")
        stamps, headers = _column(b, "timestamp"), _column(b, "headers")
        for k, v, t, h in zip(keys, values, stamps, headers, strict=True):
            yield _encode(fmt, k, v, t, h)


def _millis(t: Any) -> int | None:
    if t is None or isinstance(t, int):
        return t
    if isinstance(t, datetime.datetime):  # Spark hands timestamps over as local time
        return int(t.timestamp() * 1000)
    raise TypeError(f"column 'timestamp' must be a timestamp or milliseconds, not {t!r}")


def format_row_groups(rows: Iterable[Any], fmt_name: str) -> Iterator[Group]:
    """One :class:`FormatGroup` per Spark ``Row`` (``foreachPartition``), from its
    ``key, value, timestamp, headers`` fields (each optional).

    Example::

        groups = format_row_groups(iter([Row(key=b"k", value=b"v")]), "kafka")
    """
    fmt = formats.get(fmt_name)
    for r in rows:
        d = r.asDict() if hasattr(r, "asDict") else dict(r)
        yield _encode(fmt, d.get("key"), d.get("value"), _millis(d.get("timestamp")),
                      d.get("headers"))  # fmt: skip
