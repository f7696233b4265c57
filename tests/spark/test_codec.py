"""The row codec, event numbering, options and boundary planning (no Spark session)."""

from __future__ import annotations

import datetime as dt
import itertools
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgpack
import pyarrow as pa
import pytest
from pyspark.sql import Row
from pyspark.sql.types import (
    ArrayType,
    DecimalType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from segmentstore_client import records, sync
from segmentstore_client.errors import EventTooLarge
from segmentstore_client.spark.codec import (
    ArrowEncoder,
    CodecError,
    RowsToArrow,
    conform,
    decode_arrow,
    decode_rows,
    encode_rows,
    iter_slices,
    schema_from_json,
    schema_json_of,
    spark_arrow_schema,
    spark_schema_of_arrow,
)
from segmentstore_client.spark.options import (
    OptionError,
    ReadOptions,
    WriteOptions,
    event_number,
    group_of,
    transaction_segment,
    write_identity,
    writer_id,
)
from segmentstore_client.spark.raw import next_boundary, plan_ranges
from segmentstore_client.spark.writer import ArrowGroup, MsgpackGroup, encode_pieces

UTC = dt.UTC


def test_msgpack_extension_types_round_trip() -> None:
    values = [
        Decimal("-12.3400"),
        Decimal("1E+30"),
        dt.date(1, 1, 1),
        dt.date(9999, 12, 31),
        dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        dt.datetime(2262, 4, 11, 23, 47, 16, 854775),
        dt.timedelta(days=-3, microseconds=7),
        Row(a=1, b=Row(c=Decimal("0.5"), d=[dt.date(2024, 2, 29)])),
        {Row(k=1): "struct keys stay hashable"},
        (1, 2),
        b"\x00\xff",
        None,
        float("nan"),
        2**63 - 1,
    ]
    back = decode_rows(encode_rows([values]))[0]
    assert back[:7] == values[:7]
    assert back[7] == values[7] and back[7].b.d == [dt.date(2024, 2, 29)]
    assert back[8] == {Row(k=1): "struct keys stay hashable"}
    assert back[9] == [1, 2] and back[10] == b"\x00\xff" and back[11] is None
    assert back[12] != back[12] and back[13] == 2**63 - 1
    # A plain MessagePack reader still parses everything (extensions stay opaque).
    raw = msgpack.unpackb(encode_rows([values]), raw=False, strict_map_key=False)
    assert isinstance(raw[0][0], msgpack.ExtType) and raw[0][0].code == 1


def test_msgpack_refuses_what_it_cannot_encode() -> None:
    with pytest.raises(TypeError, match="cannot encode"):
        encode_rows([[object()]])


def test_rows_to_arrow_follows_the_spark_schema() -> None:
    inner = StructType([StructField("x", DecimalType(10, 2)), StructField("t", TimestampType())])
    schema = StructType(
        [
            StructField("id", LongType(), False),
            StructField("s", inner),
            StructField("a", ArrayType(inner)),
            StructField("m", MapType(StringType(), inner)),
            StructField("missing", StringType()),
        ]
    )
    when = dt.datetime(2024, 1, 1, tzinfo=UTC)
    rows = decode_rows(
        encode_rows(
            [
                [
                    1,
                    Row(x=Decimal("1.50"), t=when),
                    [Row(x=None, t=None)],
                    {"k": Row(x=None, t=when)},
                ],
                [2, None, None, None],
            ]
        )
    )
    batch = RowsToArrow(schema, ["id", "s", "a", "m"])(rows)
    assert batch.schema.equals(spark_arrow_schema(schema))
    assert batch.to_pylist()[0]["s"] == {"x": Decimal("1.50"), "t": when}
    assert batch.column("missing").null_count == 2


def test_arrow_encoder_keeps_the_spark_schema() -> None:
    schema = StructType([StructField("id", LongType(), False), StructField("s", StringType())])
    batch = pa.record_batch(
        [pa.array([1, 2, 3], pa.int64()), pa.array(["a", None, "c"])],
        schema=spark_arrow_schema(schema),
    )
    for compression in ("none", "lz4", "zstd"):
        enc = ArrowEncoder(batch.schema, schema_json_of(schema), compression)
        arrow_schema, batches = decode_arrow(enc.encode([batch.slice(0, 2), batch.slice(2, 1)]))
        assert spark_schema_of_arrow(arrow_schema) == schema
        assert pa.Table.from_batches(batches).to_pylist() == batch.to_pylist()
    assert schema_from_json(schema_json_of(schema)) == schema


def test_conform_selects_casts_and_fills() -> None:
    src = pa.record_batch(
        {
            "ID": pa.array([1, 2], pa.int64()),
            "ts": pa.array([0, 1], pa.timestamp("us", tz="Etc/UTC")),
            "extra": pa.array(["x", "y"]),
        }
    )
    target = pa.schema(
        [
            pa.field("ts", pa.timestamp("us", tz="UTC")),
            pa.field("id", pa.int64()),
            pa.field("gone", pa.string()),
        ]
    )
    out = conform(src, target)
    assert out.schema.equals(target)
    assert out.column(1).to_pylist() == [1, 2] and out.column(2).null_count == 2


@pytest.mark.parametrize(
    ("src", "dst", "ok"),
    [
        (pa.int32(), pa.int64(), True),
        (pa.int32(), pa.float64(), True),
        (pa.float32(), pa.float64(), True),
        (pa.decimal128(10, 2), pa.decimal128(12, 3), True),
        (pa.timestamp("us", tz="Europe/Paris"), pa.timestamp("us", tz="UTC"), True),
        (pa.list_(pa.int32()), pa.list_(pa.int64()), True),
        (pa.int64(), pa.bool_(), False),
        (pa.int32(), pa.bool_(), False),
        (pa.timestamp("us", tz="UTC"), pa.date32(), False),
        (pa.timestamp("us"), pa.timestamp("us", tz="UTC"), False),
        (pa.float64(), pa.float32(), False),
        (pa.int64(), pa.float64(), False),
        (pa.int64(), pa.int32(), False),
        (pa.decimal128(10, 2), pa.decimal128(10, 1), False),
        (pa.string(), pa.int64(), False),
        (pa.list_(pa.int64()), pa.list_(pa.int32()), False),
    ],
)
def test_conform_refuses_lossy_casts(src: pa.DataType, dst: pa.DataType, ok: bool) -> None:
    batch = pa.record_batch({"c": pa.array([None], src)})
    target = pa.schema([pa.field("c", dst)])
    if ok:
        assert conform(batch, target).schema.equals(target)
    else:
        with pytest.raises(CodecError, match=r"column 'c' holds .* without losing information"):
            conform(batch, target)


@pytest.mark.parametrize("sizes", [[10], [3, 3, 3, 1], [1] * 10, [7, 0, 3], [25]])
def test_iter_slices_cuts_exact_groups(sizes: list[int]) -> None:
    data = list(range(sum(sizes)))
    batches, pos = [], 0
    for n in sizes:
        batches.append(pa.record_batch({"v": pa.array(data[pos : pos + n], pa.int64())}))
        pos += n
    groups = list(iter_slices(batches, 4))
    counts = [sum(s.num_rows for s in g) for g in groups]
    assert all(c == 4 for c in counts[:-1]) and 0 < counts[-1] <= 4
    flat = [v for g in groups for s in g for v in s.column(0).to_pylist()]
    assert flat == data


def test_large_groups_split_deterministically() -> None:
    batch = pa.record_batch({"s": pa.array(["x" * 1000] * 64)})
    schema = StructType([StructField("s", StringType())])
    enc = ArrowEncoder(batch.schema, schema_json_of(schema), "none")
    pieces = encode_pieces(ArrowGroup([batch.slice(0, 40), batch.slice(40)], enc), 20_000)
    assert len(pieces) > 1 and sum(n for _, n in pieces) == 64
    assert all(len(p) <= 20_000 for p, _ in pieces)
    again = encode_pieces(ArrowGroup([batch.slice(0, 40), batch.slice(40)], enc), 20_000)
    assert [n for _, n in again] == [n for _, n in pieces]
    rows = []
    for payload, _ in pieces:
        for b in decode_arrow(records.decode(payload).value)[1]:
            rows.extend(b.column(0).to_pylist())
    assert rows == ["x" * 1000] * 64
    mp = encode_pieces(MsgpackGroup([["y" * 3000]] * 8, "", "none"), 7000)
    assert [n for _, n in mp] == [2, 2, 2, 2]
    with pytest.raises(EventTooLarge):
        encode_pieces(MsgpackGroup([["z" * 9_000_000]], "", "none"), 7000)


def test_event_numbers_leave_gaps_and_map_back_to_groups() -> None:
    assert event_number(0) == 1
    assert event_number(0, 1) == 3
    assert event_number(5, 7) - event_number(5, 6) == 2
    assert group_of(event_number(123, 456)) == 123
    assert event_number(1) > event_number(0, 2**20 - 1)


def test_identities_are_stable_and_attempt_free() -> None:
    a, b = write_identity("job-1"), write_identity("job-1")
    assert a == b and write_identity(None) != write_identity(None)
    assert writer_id(a, "s", 3) == writer_id(b, "s", 3) != writer_id(a, "s", 4)
    run = uuid.uuid4()
    txn = transaction_segment(a, run, "scope/stream/0", 1)
    assert txn == transaction_segment(b, run, "scope/stream/0", 1)
    assert txn != transaction_segment(a, uuid.uuid4(), "scope/stream/0", 1)  # another run
    assert write_identity("job-1", 1) != write_identity("job-1", 2) != a
    assert txn.startswith("scope/stream/0#transaction.") and len(txn.split(".")[-1]) == 32
    assert isinstance(writer_id(a, "s", 0), uuid.UUID)


def test_options_are_checked() -> None:
    base = {"endpoint": "tcp://127.0.0.1:1"}
    with pytest.raises(OptionError, match="segment"):
        WriteOptions.parse(base)
    with pytest.raises(OptionError, match="either"):
        WriteOptions.parse({**base, "segment": "a", "segments": "b"})
    with pytest.raises(OptionError, match="encoding"):
        WriteOptions.parse({**base, "segment": "a", "encoding": "csv"})
    with pytest.raises(OptionError, match="rowsPerEvent"):
        WriteOptions.parse({**base, "segment": "a", "rows_per_event": "0"})
    with pytest.raises(OptionError, match="atomic"):
        WriteOptions.parse({**base, "segment": "a", "atomic": "maybe"})
    with pytest.raises(OptionError, match="endpoint"):
        WriteOptions.parse({"segment": "a"})
    opts = WriteOptions.parse({**base, "segments": "a, b ,c"})
    assert opts.segments == ("a", "b", "c") and opts.target_of(4) == "b"
    assert opts.compression == "zstd" and opts.encoding == "arrow"
    assert WriteOptions.parse({**base, "segment": "a", "encoding": "msgpack"}).compression == "none"
    r = ReadOptions.parse({**base, "segment": "a", "output": "RAW", "partition_bytes": "1_048_576"})
    assert r.output == "raw" and r.partition_bytes == 1 << 20


def test_options_take_camel_case_and_aliases_and_reject_unknown_ones() -> None:
    base = {"endpoint": "tcp://127.0.0.1:1", "segment": "a"}
    # Spark lowercases keys; camelCase, its lowercase and the snake_case alias all work
    for key in ("writeId", "writeid", "write_id", "WRITE_ID"):
        assert WriteOptions.parse({**base, key: "w"}).write_id == "w"
    opts = WriteOptions.parse({**base, "rowsPerEvent": "7", "timeout": "2.5", "writeId": "x"})
    assert opts.rows_per_event == 7 and opts.timeout == 2.5 and opts.timeouts.connect == 2.5
    r = ReadOptions.parse({**base, "startingoffsets": "latest", "maxBytesPerTrigger": "4096"})
    assert r.starting_offsets == "latest" and r.max_bytes_per_trigger == 4096
    assert ReadOptions.parse({**base, "max_bytes_per_trigger": "9"}).max_bytes_per_trigger == 9
    # a typo must not silently drop a guarantee
    with pytest.raises(OptionError, match=r"'atomc' is unknown.*did you mean 'atomic'.*known"):
        WriteOptions.parse({**base, "atomc": "true"})
    with pytest.raises(OptionError, match=r"known options: .*writeId"):
        WriteOptions.parse({**base, "bogus": "1"})
    with pytest.raises(OptionError, match="other direction"):
        ReadOptions.parse({**base, "atomic": "true"})
    assert WriteOptions.parse({**base, "saveMode": "ErrorIfExists"}).save_mode == "error"
    with pytest.raises(OptionError, match="saveMode"):
        WriteOptions.parse({**base, "savemode": "overwrite"})
    with pytest.raises(OptionError, match="given twice"):
        WriteOptions.parse({**base, "writeId": "a", "write_id": "b"})
    with pytest.raises(OptionError, match=r"writeVersion.*needs.*writeId"):
        WriteOptions.parse({**base, "writeVersion": "3"})
    with pytest.raises(OptionError, match="timeout"):
        ReadOptions.parse({**base, "timeout": "soon"})
    with pytest.raises(OptionError, match="control character"):
        WriteOptions.parse({**base, "segment": "a\x01b"})
    # Spark's own keys pass; `path` (load("x") / save("x")) names the segment
    assert ReadOptions.parse({"endpoint": "tcp://h:1", "path": "s/0"}).segments == ("s/0",)
    assert WriteOptions.parse({**base, "checkpointLocation": "/tmp/c"}).segments == ("a",)


def test_option_table_documents_every_option() -> None:
    from segmentstore_client.spark.option_table import OPTIONS, markdown_table

    table = markdown_table()
    names = [o.name for o in OPTIONS]
    assert len(set(names)) == len(names)
    for o in OPTIONS:
        assert f"| `{o.name}` |" in table and o.doc
    readme = Path(__file__).resolve().parents[2] / "README.md"
    assert table in readme.read_text(), "README's Spark options table is stale"


def _payloads(sizes: list[int]) -> list[bytes]:
    return [bytes([i % 251]) * n for i, n in enumerate(sizes)]


def test_plan_ranges_cuts_at_event_boundaries(endpoint: str, seg: str) -> None:
    sizes = [100] * 300 + [50_000] * 20 + [7] * 1000 + [300_000] * 3
    with sync.connect(endpoint) as c:
        c.create_segment(seg)
        with c.writer(seg) as w:
            w.write_many(_payloads(sizes))
        length = c.segment_info(seg).length
        offsets = [e.offset for e in c.reader(seg)]
    with sync.connect(endpoint) as client:
        ranges = plan_ranges(client, seg, 0, length, 100_000)
        assert ranges[0][0] == 0 and ranges[-1][1] == length
        assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
        assert all(a in offsets for a, _ in ranges) and len(ranges) > 5
        assert plan_ranges(client, seg, 0, length, length) == [(0, length)]
        capped = plan_ranges(client, seg, 0, length, 1000, max_requests=3)
        assert capped[-1][1] == length and all(a in offsets for a, _ in capped)
        b = next_boundary(client, seg, 0, length, 1000)
        assert b in offsets and 0 < b <= 1000
        big = offsets[-1]
        assert next_boundary(client, seg, big, length, 10) == length  # one event at least
        assert next_boundary(client, seg, 0, length, length) == length


def test_records_of_other_producers_need_output_records(endpoint: str, seg: str) -> None:
    from segmentstore_client.spark.codec import CodecError
    from segmentstore_client.spark.reader import RECORDS_SCHEMA, EventDecoder

    with sync.connect(endpoint) as c:
        c.create_segment(seg)
        with c.writer(seg) as w:
            w.write(records.encode(b"v1", key=b"k1", headers={"h": b"1"}))
        events = list(c.reader(seg))
    schema = StructType([StructField("id", LongType())])
    with pytest.raises(CodecError, match="output"):
        list(EventDecoder("rows", schema).decode(seg, events))
    batch = next(EventDecoder("records", RECORDS_SCHEMA).decode(seg, events))
    row: dict[str, Any] = batch.to_pylist()[0]
    assert (row["key"], row["value"], row["headers"]) == (b"k1", b"v1", [("h", b"1")])
