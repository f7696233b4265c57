"""Row codec: how the Spark integration turns rows into event payloads and back.

Two encodings, chosen per write with ``.option("encoding", ...)``:

``arrow`` (the default, measurably faster; see the README's Spark section)
    One event holds one Arrow IPC *stream* of the rows: the schema message, then the
    record batch(es). The Spark schema (as JSON) rides in the Arrow schema metadata under
    ``spark.schema``, so a reader recovers exact Spark types (``TIMESTAMP`` vs
    ``TIMESTAMP_NTZ``, ``DECIMAL(p, s)``, nested structs) without being told.

``msgpack``
    One event holds a MessagePack array of rows, each row an array of its values in
    schema order. Values MessagePack has no type for are extension types, so the payload
    stays self-describing and lossless for any MessagePack reader:

    ====  ===========================  ==============================================
    code  Python / Spark type          payload
    ====  ===========================  ==============================================
    1     ``Decimal`` / DECIMAL        the decimal's exact string (``"-12.3400"``)
    2     ``date`` / DATE              int32 big-endian days since 1970-01-01
    3     aware ``datetime`` /         int64 big-endian microseconds since the epoch
          TIMESTAMP                    (UTC instant)
    4     naive ``datetime`` /         int64 big-endian microseconds since
          TIMESTAMP_NTZ                1970-01-01T00:00 (wall clock)
    5     ``timedelta`` /              int64 big-endian microseconds
          DAY TO SECOND INTERVAL
    6     ``Row`` / STRUCT             MessagePack ``[field names, values]``
    ====  ===========================  ==============================================

    Structs that arrive from Arrow are plain maps (``{"field": value}``), maps arrive as
    arrays of ``[key, value]`` pairs; with the Spark schema beside the rows (in the
    record's ``spark.schema`` header) every value comes back as the same Spark type.

Everything here is pure and stateless; nothing touches the network.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import json
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Final

import msgpack
import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    DataType,
    MapType,
    Row,
    StructType,
    YearMonthIntervalType,
    _parse_datatype_json_string,
)

ARROW_CONTENT_TYPE: Final = "application/vnd.apache.arrow.stream"
"""Record header ``content-type`` of an event holding an Arrow IPC stream."""
MSGPACK_CONTENT_TYPE: Final = "application/x-spark-rows+msgpack"
"""Record header ``content-type`` of an event holding a MessagePack array of rows."""
SCHEMA_METADATA_KEY: Final = b"spark.schema"
"""Arrow schema metadata key (and record header name) carrying the Spark schema JSON."""
SCHEMA_HEADER: Final = "spark.schema"
ROWS_HEADER: Final = "spark.rows"
CONTENT_TYPE_HEADER: Final = "content-type"

EXT_DECIMAL: Final = 1
EXT_DATE: Final = 2
EXT_TIMESTAMP: Final = 3
EXT_TIMESTAMP_NTZ: Final = 4
EXT_DURATION: Final = 5
EXT_ROW: Final = 6

_I32: Final = struct.Struct(">i")
_I64: Final = struct.Struct(">q")
_EPOCH_DATE: Final = _dt.date(1970, 1, 1)
_EPOCH_UTC: Final = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_EPOCH_NAIVE: Final = _dt.datetime(1970, 1, 1)
_US: Final = _dt.timedelta(microseconds=1)

ENCODINGS: Final = ("arrow", "msgpack")
COMPRESSIONS: Final = ("none", "lz4", "zstd")


class CodecError(ValueError):
    """An event payload does not decode as rows of the expected shape."""


# --- schemas -----------------------------------------------------------------------------


def spark_arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects a Python data source's record batches to have.

    Example::

        spark_arrow_schema(StructType.fromDDL("id BIGINT, ts TIMESTAMP"))
        # id: int64, ts: timestamp[us, tz=UTC]
    """
    return to_arrow_schema(schema, timezone="UTC")


def schema_from_json(text: str) -> StructType:
    """Parse a Spark schema JSON (``StructType.json()``) back into a ``StructType``."""
    parsed = _parse_datatype_json_string(text)
    if not isinstance(parsed, StructType):
        raise CodecError(f"not a struct schema: {text[:200]!r}")
    return parsed


# --- Arrow IPC ---------------------------------------------------------------------------


def _ipc_options(compression: str) -> pa.ipc.IpcWriteOptions:
    if compression not in COMPRESSIONS:
        raise ValueError(f"compression must be one of {COMPRESSIONS}, not {compression!r}")
    return pa.ipc.IpcWriteOptions(compression=None if compression == "none" else compression)


class ArrowEncoder:
    """Encodes record batches of one schema as Arrow IPC streams (one stream per event).

    Example::

        enc = ArrowEncoder(batch.schema, spark_schema_json)
        payload = enc.encode([batch.slice(0, 100)])
        assert decode_arrow(payload)[1][0].num_rows == 100
    """

    __slots__ = ("_options", "schema")

    def __init__(
        self, schema: pa.Schema, spark_schema_json: str | None = None, compression: str = "none"
    ) -> None:
        if spark_schema_json is not None:
            meta = dict(schema.metadata or {})
            meta[SCHEMA_METADATA_KEY] = spark_schema_json.encode()
            schema = schema.with_metadata(meta)
        self.schema = schema
        self._options = _ipc_options(compression)

    def encode(self, batches: Sequence[pa.RecordBatch]) -> bytes:
        """One IPC stream holding ``batches`` (slices are written without copying rows
        outside the slice)."""
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, self.schema, options=self._options) as w:
            for b in batches:
                w.write_batch(b if b.schema.equals(self.schema) else _with_schema(b, self.schema))
        return sink.getvalue().to_pybytes()  # type: ignore[no-any-return]


def _with_schema(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(batch.columns, schema=schema)


def decode_arrow(
    payload: bytes | memoryview, columns: frozenset[str] | None = None
) -> tuple[pa.Schema, list[pa.RecordBatch]]:
    """The schema and record batches of one Arrow IPC stream payload; with ``columns``
    (lowercase names) only those columns are decoded (and decompressed).

    Example::

        schema, batches = decode_arrow(payload)
        _, only_ids = decode_arrow(payload, frozenset({"id"}))
    """
    try:
        buf = pa.py_buffer(payload)
        reader = pa.ipc.open_stream(buf)
        if columns is not None:
            names = reader.schema.names
            keep = [i for i, n in enumerate(names) if n.lower() in columns]
            if len(keep) < len(names):
                options = pa.ipc.IpcReadOptions(included_fields=keep)
                reader = pa.ipc.open_stream(buf, options=options)
        batches = list(reader)
    except (pa.ArrowInvalid, OSError) as e:
        raise CodecError(f"not an Arrow IPC stream: {e}") from e
    return reader.schema, batches


def spark_schema_of_arrow(schema: pa.Schema) -> StructType | None:
    """The Spark schema stored in an Arrow schema's metadata by :class:`ArrowEncoder`."""
    raw = (schema.metadata or {}).get(SCHEMA_METADATA_KEY)
    return schema_from_json(raw.decode()) if raw else None


def _widens(src: pa.DataType, dst: pa.DataType) -> bool:
    """True when every value of ``src`` is exactly a value of ``dst`` (ints to wider
    ints or to a float that holds them exactly, floats to doubles, decimals to decimals
    with as many integer and fraction digits)."""
    t = pa.types
    if t.is_integer(src) and t.is_integer(dst):
        if t.is_signed_integer(src) and t.is_unsigned_integer(dst):
            return False
        extra = 1 if t.is_unsigned_integer(src) and t.is_signed_integer(dst) else 0
        return bool(src.bit_width + extra <= dst.bit_width)
    if t.is_integer(src) and t.is_floating(dst):
        mantissa = {16: 11, 32: 24, 64: 53}[dst.bit_width]
        return bool(src.bit_width <= mantissa)
    if t.is_floating(src) and t.is_floating(dst):
        return bool(src.bit_width <= dst.bit_width)
    if t.is_decimal(src) and t.is_decimal(dst):
        return bool(
            src.scale <= dst.scale and src.precision - src.scale <= dst.precision - dst.scale
        )
    return False


def lossless(src: pa.DataType, dst: pa.DataType) -> bool:
    """True when reading ``src`` values as ``dst`` changes nothing but labels or widens
    exactly: identical types, a timestamp's time-zone label, field nullability, string
    and binary offset widths, exact numeric widening, and the same at any depth.

    Example::

        lossless(pa.int32(), pa.int64())     # True
        lossless(pa.int64(), pa.bool_())     # False
    """
    t = pa.types
    if src.equals(dst):
        return True
    if t.is_timestamp(src) and t.is_timestamp(dst):
        # Only the zone label may differ; a zone-less (wall clock) value is not an instant.
        return bool(src.unit == dst.unit and (src.tz is None) == (dst.tz is None))
    if (t.is_string(src) or t.is_large_string(src)) and (
        t.is_string(dst) or t.is_large_string(dst)
    ):
        return True
    if (t.is_binary(src) or t.is_large_binary(src)) and (
        t.is_binary(dst) or t.is_large_binary(dst)
    ):
        return True
    if (t.is_list(src) or t.is_large_list(src)) and (t.is_list(dst) or t.is_large_list(dst)):
        return lossless(src.value_type, dst.value_type)
    if t.is_map(src) and t.is_map(dst):
        return lossless(src.key_type, dst.key_type) and lossless(src.item_type, dst.item_type)
    if t.is_struct(src) and t.is_struct(dst):
        have = {src.field(i).name: src.field(i).type for i in range(src.num_fields)}
        for i in range(dst.num_fields):
            f = dst.field(i)
            if f.name in have and not lossless(have[f.name], f.type):
                return False
        return True
    return _widens(src, dst)


def check_lossless(src: pa.Schema, target: pa.Schema) -> None:
    """Raise :class:`CodecError` naming the first column of ``target`` that ``src``
    holds with a type it cannot be read as without losing information."""
    lower = {n.lower(): i for i, n in enumerate(src.names)}
    for field in target:
        idx = src.get_field_index(field.name)
        if idx < 0:
            idx = lower.get(field.name.lower(), -1)
        if idx >= 0 and not lossless(src.field(idx).type, field.type):
            raise CodecError(
                f"column {field.name!r} holds {src.field(idx).type}, which cannot be read as "
                f"{field.type} without losing information; read it as stored and cast in "
                "Spark if that is what you want"
            )


def conform(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """``batch`` with exactly ``target``'s columns (by name; case-insensitive as a
    fallback), types and nullability: what Spark checks a data source's batches against.
    Missing columns become nulls; a differing type is cast only when the cast is
    :func:`lossless`, otherwise :class:`CodecError` names the column.

    Example::

        out = conform(batch, spark_arrow_schema(read_schema))
    """
    if batch.schema.equals(target):
        return batch
    names = batch.schema.names
    lower = {n.lower(): i for i, n in enumerate(names)}
    cols: list[pa.Array] = []
    n = batch.num_rows
    for field in target:
        idx = batch.schema.get_field_index(field.name)
        if idx < 0:
            idx = lower.get(field.name.lower(), -1)
        if idx < 0:
            cols.append(pa.nulls(n, field.type))
            continue
        col = batch.column(idx)
        if not col.type.equals(field.type):
            if not lossless(col.type, field.type):
                check_lossless(batch.schema, pa.schema([field]))
            try:
                col = col.cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise CodecError(
                    f"column {field.name!r}: cannot read {col.type} as {field.type}: {e}"
                ) from e
        cols.append(col)
    return pa.RecordBatch.from_arrays(cols, schema=target)


# --- MessagePack -------------------------------------------------------------------------


def _default(obj: Any) -> Any:
    """MessagePack ``default`` hook: the extension types of the module docstring."""
    if isinstance(obj, Row):
        fields = getattr(obj, "__fields__", None)
        if fields is None:
            return list(obj)
        return msgpack.ExtType(EXT_ROW, _pack([list(fields), list(obj)]))
    if isinstance(obj, tuple):
        return list(obj)
    if isinstance(obj, decimal.Decimal):
        return msgpack.ExtType(EXT_DECIMAL, str(obj).encode())
    if isinstance(obj, _dt.datetime):
        if obj.tzinfo is None:
            return msgpack.ExtType(EXT_TIMESTAMP_NTZ, _I64.pack((obj - _EPOCH_NAIVE) // _US))
        return msgpack.ExtType(EXT_TIMESTAMP, _I64.pack((obj - _EPOCH_UTC) // _US))
    if isinstance(obj, _dt.date):
        return msgpack.ExtType(EXT_DATE, _I32.pack((obj - _EPOCH_DATE).days))
    if isinstance(obj, _dt.timedelta):
        return msgpack.ExtType(EXT_DURATION, _I64.pack(obj // _US))
    if isinstance(obj, bytearray | memoryview):
        return bytes(obj)
    raise TypeError(f"cannot encode {type(obj).__name__} value {obj!r} as MessagePack")


def _pack(obj: Any) -> bytes:
    return msgpack.packb(  # type: ignore[no-any-return]
        obj, default=_default, strict_types=True, use_bin_type=True, datetime=False
    )


def _ext_hook(code: int, data: bytes) -> Any:
    if code == EXT_DECIMAL:
        return decimal.Decimal(data.decode())
    if code == EXT_DATE:
        return _EPOCH_DATE + _dt.timedelta(days=_I32.unpack(data)[0])
    if code == EXT_TIMESTAMP:
        return _EPOCH_UTC + _I64.unpack(data)[0] * _US
    if code == EXT_TIMESTAMP_NTZ:
        return _EPOCH_NAIVE + _I64.unpack(data)[0] * _US
    if code == EXT_DURATION:
        return _I64.unpack(data)[0] * _US
    if code == EXT_ROW:
        names, values = _unpack(data)
        return Row(**dict(zip(names, values, strict=True)))
    return msgpack.ExtType(code, data)


def _unpack(data: bytes | memoryview) -> Any:
    return msgpack.unpackb(
        data, ext_hook=_ext_hook, raw=False, strict_map_key=False, use_list=True, timestamp=0
    )


def encode_rows(rows: Iterable[Sequence[Any]]) -> bytes:
    """A MessagePack array of rows (each a sequence of values), extension types for what
    MessagePack lacks.

    Example::

        payload = encode_rows([(1, Decimal("1.50"), date(2024, 1, 31))])
        assert decode_rows(payload) == [[1, Decimal("1.50"), date(2024, 1, 31)]]
    """
    return _pack([r if type(r) is list else list(r) for r in rows])


def decode_rows(payload: bytes | memoryview) -> list[list[Any]]:
    """The rows of a payload made by :func:`encode_rows` (values as Python objects)."""
    try:
        rows = _unpack(payload)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as e:
        raise CodecError(f"not a MessagePack array of rows: {e}") from e
    if not isinstance(rows, list):
        raise CodecError(f"expected a MessagePack array of rows, got {type(rows).__name__}")
    return rows


def rows_of_batch(batch: pa.RecordBatch) -> list[tuple[Any, ...]]:
    """The rows of an Arrow batch as tuples of Python values (column-wise conversion)."""
    if batch.num_columns == 0:
        return [()] * batch.num_rows
    return list(zip(*(c.to_pylist() for c in batch.columns), strict=True))


def _arrowable(dt: DataType) -> Callable[[Any], Any] | None:
    """A converter making decoded values acceptable to ``pa.array`` for Spark type ``dt``
    (Rows to dicts, at any depth), or None when values need no conversion."""
    if isinstance(dt, StructType):
        subs = [(f.name, _arrowable(f.dataType)) for f in dt.fields]

        def struct_value(v: Any) -> Any:
            if v is None:
                return None
            if isinstance(v, dict):
                items = v
            elif isinstance(v, Row) and hasattr(v, "__fields__"):
                items = v.asDict(recursive=False)
            elif isinstance(v, list | tuple):
                items = dict(zip([name for name, _ in subs], v, strict=False))
            else:
                raise CodecError(f"expected a struct value, got {type(v).__name__}")
            return {
                name: (conv(items.get(name)) if conv else items.get(name)) for name, conv in subs
            }

        return struct_value
    if isinstance(dt, ArrayType):
        elem = _arrowable(dt.elementType)
        if elem is None:
            return None
        return lambda v: None if v is None else [elem(x) for x in v]
    if isinstance(dt, MapType):
        kc, vc = _arrowable(dt.keyType), _arrowable(dt.valueType)

        def map_value(v: Any) -> Any:
            if v is None:
                return None
            pairs = v.items() if isinstance(v, dict) else v
            return [(kc(k) if kc else k, vc(x) if vc else x) for k, x in pairs]

        return map_value
    return None


class RowsToArrow:
    """Builds Arrow batches of a Spark schema from decoded MessagePack rows.

    Rows are arrays in the writer's column order (``source_names``); the output has the
    read schema's columns, matched by name, missing ones null.

    Example::

        build = RowsToArrow(read_schema, source_names=["id", "name"])
        batch = build(decode_rows(payload))
    """

    __slots__ = ("_converters", "_index", "_target")

    def __init__(self, schema: StructType, source_names: Sequence[str] | None = None) -> None:
        self._target = spark_arrow_schema(schema)
        names = list(source_names) if source_names is not None else schema.names
        pos = {n: i for i, n in enumerate(names)}
        lower = {n.lower(): i for i, n in enumerate(names)}
        self._index = [pos.get(f.name, lower.get(f.name.lower(), -1)) for f in schema.fields]
        self._converters = [_arrowable(f.dataType) for f in schema.fields]

    def __call__(self, rows: list[Any]) -> pa.RecordBatch:
        n = len(rows)
        cols: list[pa.Array] = []
        for field, idx, conv in zip(self._target, self._index, self._converters, strict=True):
            if idx < 0:
                cols.append(pa.nulls(n, field.type))
                continue
            try:
                if rows and isinstance(rows[0], dict):
                    values = [r.get(field.name) for r in rows]
                else:
                    values = [r[idx] if idx < len(r) else None for r in rows]
                if conv is not None:
                    values = [conv(v) for v in values]
                cols.append(pa.array(values, type=field.type))
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, KeyError) as e:
                raise CodecError(f"column {field.name!r}: {e}") from e
        return pa.RecordBatch.from_arrays(cols, schema=self._target)


# --- record headers ----------------------------------------------------------------------


def arrow_headers(rows: int) -> dict[str, bytes]:
    """Record headers of an Arrow event (the Spark schema is inside the IPC stream)."""
    return {CONTENT_TYPE_HEADER: ARROW_CONTENT_TYPE.encode(), ROWS_HEADER: str(rows).encode()}


def msgpack_headers(rows: int, spark_schema_json: str) -> dict[str, bytes]:
    """Record headers of a MessagePack event: content type, row count, Spark schema
    (omitted when ``spark_schema_json`` is empty)."""
    headers = {CONTENT_TYPE_HEADER: MSGPACK_CONTENT_TYPE.encode(), ROWS_HEADER: str(rows).encode()}
    if spark_schema_json:
        headers[SCHEMA_HEADER] = spark_schema_json.encode()
    return headers


def _holds_year_month(dt: DataType) -> bool:
    if isinstance(dt, YearMonthIntervalType):
        return True
    if isinstance(dt, StructType):
        return any(_holds_year_month(f.dataType) for f in dt.fields)
    if isinstance(dt, ArrayType):
        return _holds_year_month(dt.elementType)
    if isinstance(dt, MapType):
        return _holds_year_month(dt.keyType) or _holds_year_month(dt.valueType)
    return False


def unwritable_column(schema: StructType) -> str | None:
    """Why a column of ``schema`` cannot be written (None: every column can).

    pyspark has no Arrow type for INTERVAL YEAR TO MONTH, so the workers cannot hand
    such a column over (they failed with a bare ``KeyError: 21``); say so on the driver.

    Example::

        unwritable_column(StructType.fromDDL("id bigint")) is None
    """
    for f in schema.fields:
        if _holds_year_month(f.dataType):
            return (
                f"column '{f.name}' holds INTERVAL YEAR TO MONTH ({f.dataType.simpleString()}),"
                " which pyspark cannot convert to Arrow; cast it first (e.g. to string, or to"
                " its months as an int)"
            )
    return None


def schema_json_of(schema: StructType) -> str:
    """Compact, stable JSON of a Spark schema (what the headers carry)."""
    return json.dumps(schema.jsonValue(), separators=(",", ":"), sort_keys=True)


def iter_slices(batches: Iterable[pa.RecordBatch], rows: int) -> Iterator[list[pa.RecordBatch]]:
    """Re-cut a stream of batches into groups of exactly ``rows`` rows (the last group may
    be shorter), whatever sizes the input batches have. Slices are zero-copy.

    This is what makes event numbering deterministic: group ``k`` always holds the
    partition's rows ``k * rows .. (k + 1) * rows - 1``.

    Example::

        [sum(b.num_rows for b in g) for g in iter_slices(batches, 10_000)]
    """
    if rows <= 0:
        raise ValueError("rows must be positive")
    pending: list[pa.RecordBatch] = []
    have = 0
    for batch in batches:
        start, n = 0, batch.num_rows
        while start < n:
            take = min(rows - have, n - start)
            pending.append(batch if take == n and start == 0 else batch.slice(start, take))
            have += take
            start += take
            if have == rows:
                yield pending
                pending, have = [], 0
    if have:
        yield pending
