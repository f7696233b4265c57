"""Batch writes and reads through the ``segmentstore`` format on a real local Spark.

``SPARK_BIG=1`` runs the round trip with the issue's 1,000,000 rows instead of 200,000.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from segmentstore_client import sync
from segmentstore_client.spark.options import event_number

pytestmark = pytest.mark.spark


def _df(spark: Any, n: int, partitions: int = 2) -> Any:
    return spark.range(0, n, 1, partitions).selectExpr(
        "id",
        "cast(id % 1000 as int) as k",
        "concat('row-', cast(id as string)) as s",
        "cast(id as double) / 7 as d",
        "timestamp_micros(id * 1000) as ts",
    )


def _write(df: Any, endpoint: str, seg: str, fmt: str = "segmentstore", **opts: str) -> None:
    w = df.write.format(fmt).option("endpoint", endpoint).option("segment", seg)
    for k, v in opts.items():
        w = w.option(k, v)
    w.mode("append").save()


def _read(spark: Any, endpoint: str, seg: str, **opts: str) -> Any:
    r = spark.read.format("segmentstore").option("endpoint", endpoint).option("segment", seg)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def _assert_exactly(df: Any, n: int) -> None:
    """Ids 0..n-1, each exactly once: no duplicates, no gaps."""
    row = df.selectExpr(
        "count(*) as c", "count(distinct id) as u", "min(id) as lo", "max(id) as hi"
    ).first()
    assert (row.c, row.u, row.lo, row.hi) == (n, n, 0, n - 1), row


ROUND_TRIP_ROWS = 1_000_000 if os.environ.get("SPARK_BIG") == "1" else 200_000


def test_million_rows_round_trip(spark: Any, endpoint: str, seg: str) -> None:
    n = ROUND_TRIP_ROWS
    df = _df(spark, n)
    _write(df, endpoint, seg)
    back = _read(spark, endpoint, seg, partition_bytes=str((4 << 20) * n // 1_000_000))
    assert back.schema == df.schema
    assert back.rdd.getNumPartitions() > 1  # one large segment, split into offset ranges
    # Every row back, each once, every value as written: a fingerprint of the whole contents
    # (two exceptAll shuffles cost 20-60 s of the suite on two cores).
    assert _fingerprint(back) == _fingerprint(df) and _fingerprint(df)[0] == n


def _fingerprint(df: Any) -> tuple[int, int, int]:
    row = df.selectExpr("count(*)", "count(distinct id)", "sum(hash(*))").first()
    return (row[0], row[1], row[2])


ARROW_BYTES_CHECK_OFF = ("spark.sql.execution.arrow.maxBytesPerBatch", "2147483647")
"""The session setting the README recommends for large writes (Spark skips its per-row
batch-size check only at this exact value)."""


def test_write_with_spark_batch_size_check_off(spark: Any, endpoint: str, seg: str) -> None:
    # The README's recommended setting, plus Spark batches that do not line up with
    # rowsPerEvent: events still hold rows k*R .. (k+1)*R-1 of their partition.
    n = 30_000
    df = _df(spark, n)
    key, value = ARROW_BYTES_CHECK_OFF
    spark.conf.set(key, value)
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "3000")
    try:
        _write(df, endpoint, seg)
    finally:
        spark.conf.unset(key)
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert _fingerprint(_read(spark, endpoint, seg)) == _fingerprint(df)
    # 15,000 rows per partition in events of 10,000 rows: 2 events each, not 5 (Spark's
    # 3,000-row batches).
    assert _read(spark, endpoint, seg, output="raw").count() == 4


def test_task_retry_resumes_without_duplicates_or_gaps(
    spark: Any, endpoint: str, seg: str, tmp_path: Path
) -> None:
    n = 200_000
    log = tmp_path / "commits.jsonl"
    # Partition 0 (100k rows) fails on its first attempt once 50k rows are durable.
    _write(
        _df(spark, n),
        endpoint,
        seg,
        "segmentstore_faulty",
        fail_partition="0",
        fail_after_rows="50000",
        commit_log=str(log),
    )
    _assert_exactly(_read(spark, endpoint, seg), n)
    msgs = sorted(
        (json.loads(line) for line in log.read_text().splitlines()), key=lambda m: m["partition"]
    )
    p0, p1 = msgs
    # The retry wrote as the same writer: the server already held the first 5 events
    # (rows 0..49,999), which it did not write again; it wrote the other 5.
    assert p0["attempt"] == 1 and p0["resumed_from"] == event_number(4)
    assert p0["events"] == 5 and p0["last_event_number"] == event_number(9)
    assert p0["rows"] == 100_000 and p0["writer_id"] != p1["writer_id"]
    assert p1["attempt"] == 0 and p1["resumed_from"] == 0 and p1["events"] == 10
    with sync.connect(endpoint) as c:
        assert c.last_event_number(seg, p0["writer_id"]) == event_number(9)


def test_concurrent_attempts_write_once(endpoint: str, seg: str) -> None:
    """Two attempts of one partition writing at the same time (speculation) store each
    event once."""
    import threading

    import pyarrow as pa
    from segmentstore_client.spark.options import WriteOptions
    from segmentstore_client.spark.writer import WriteJob, arrow_groups, write_partition

    opts = WriteOptions.parse(
        {"endpoint": endpoint, "segment": seg, "rows_per_event": "100", "compression": "none"}
    )
    batch = pa.record_batch({"id": pa.array(range(20_000), pa.int64())})
    job = WriteJob(opts, uuid.uuid4(), '{"type":"struct","fields":[]}')
    with sync.connect(endpoint) as c:
        c.create_segment(seg, exist_ok=True)
    errors: list[BaseException] = []

    def attempt(a: int) -> None:
        try:
            write_partition(
                job,
                0,
                a,
                lambda: arrow_groups(pa.Table.from_batches([batch]).to_batches(500), opts, "{}"),
            )
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=attempt, args=(a,)) for a in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    from segmentstore_client import records
    from segmentstore_client.spark.codec import decode_arrow

    ids: list[int] = []
    with sync.connect(endpoint) as c:
        for e in c.reader(seg):
            for b in decode_arrow(records.decode(e.data).value)[1]:
                ids.extend(b.column(0).to_pylist())
    assert ids == list(range(20_000))


def test_driver_retry_with_write_id_is_idempotent(spark: Any, endpoint: str, seg: str) -> None:
    n = 50_000
    df = _df(spark, n)
    # A first run fails for good (every attempt of partition 1 dies half way) ...
    with pytest.raises(Exception, match="injected failure"):
        _write(
            df,
            endpoint,
            seg,
            "segmentstore_faulty",
            write_id=f"drv-{seg}",
            fail_partition="1",
            fail_after_rows="10000",
            fail_attempts="all",
        )
    with sync.connect(endpoint) as c:
        assert c.segment_info(seg).length > 0  # non-atomic: partial data is visible
    # ... the driver runs the same write again: it completes without duplicates ...
    _write(df, endpoint, seg, write_id=f"drv-{seg}")
    _assert_exactly(_read(spark, endpoint, seg), n)
    # ... and a third run of the committed write changes nothing.
    with sync.connect(endpoint) as c:
        length = c.segment_info(seg).length
    _write(df, endpoint, seg, write_id=f"drv-{seg}")
    with sync.connect(endpoint) as c:
        assert c.segment_info(seg).length == length


def test_abort_reports_what_is_left(spark: Any, endpoint: str, seg: str) -> None:
    with pytest.raises(Exception) as info:
        _write(
            _df(spark, 40_000),
            endpoint,
            seg,
            "segmentstore_faulty",
            write_id=f"abort-{seg}",
            fail_partition="1",
            fail_after_rows="10000",
            fail_attempts="all",
        )
    text = str(info.value)
    assert "injected failure" in text
    # abort() reports, per partition, what the target keeps and how to finish the write
    assert "WriteAborted" in text
    assert "partition 0 -> " in text and "complete, 20000 row(s)" in text
    assert "partition 1 -> " in text and "incomplete" in text and "rows 0..9999" in text
    assert f"option('writeId', 'abort-{seg}')" in text


def test_atomic_commit_and_abort(spark: Any, endpoint: str, seg: str) -> None:
    n = 40_000
    df = _df(spark, n)
    with pytest.raises(Exception, match="injected failure"):
        _write(
            df,
            endpoint,
            seg,
            "segmentstore_faulty",
            atomic="true",
            write_id=f"atomic-{seg}",
            fail_partition="1",
            fail_after_rows="10000",
            fail_attempts="all",
        )
    with sync.connect(endpoint) as c:
        assert c.segment_info(seg).length == 0  # nothing visible after the abort
    # The same atomic write, now succeeding, commits everything at once.
    _write(df, endpoint, seg, atomic="true", write_id=f"atomic-{seg}")
    _assert_exactly(_read(spark, endpoint, seg), n)


def test_atomic_task_retry(spark: Any, endpoint: str, seg: str) -> None:
    n = 60_000
    _write(
        _df(spark, n),
        endpoint,
        seg,
        "segmentstore_faulty",
        atomic="true",
        fail_partition="0",
        fail_after_rows="10000",
    )
    _assert_exactly(_read(spark, endpoint, seg), n)


@pytest.mark.parametrize("encoding", ["arrow", "msgpack"])
def test_types_round_trip_losslessly(spark: Any, endpoint: str, seg: str, encoding: str) -> None:
    from pyspark.sql import Row
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        BooleanType,
        DateType,
        DecimalType,
        DoubleType,
        FloatType,
        IntegerType,
        LongType,
        MapType,
        ShortType,
        StringType,
        StructField,
        StructType,
        TimestampNTZType,
        TimestampType,
    )

    inner = StructType(
        [StructField("x", DecimalType(38, 18)), StructField("when", TimestampType())]
    )
    schema = StructType(
        [
            StructField("id", LongType(), False),
            StructField("i", IntegerType()),
            StructField("h", ShortType()),
            StructField("b", BooleanType()),
            StructField("f", FloatType()),
            StructField("d", DoubleType()),
            StructField("s", StringType()),
            StructField("bin", BinaryType()),
            StructField("dec", DecimalType(20, 4)),
            StructField("day", DateType()),
            StructField("ts", TimestampType()),
            StructField("ntz", TimestampNTZType()),
            StructField("nested", inner),
            StructField("arr", ArrayType(inner)),
            StructField("m", MapType(StringType(), DecimalType(10, 2))),
        ]
    )
    utc = dt.UTC
    rows = [
        Row(
            id=i,
            i=None if i == 3 else -(2**31) + i,
            h=i,
            b=i % 2 == 0,
            f=1.5 * i,
            d=float("inf") if i == 1 else i / 3,
            s=None if i == 2 else f"ünïcode {i}",
            bin=bytes([i, 0, 255]),
            dec=Decimal("-1234567890123456.7890") + i,
            day=dt.date(1969, 12, 31) + dt.timedelta(days=i),
            ts=dt.datetime(1900, 1, 1, 0, 0, 0, 1, tzinfo=utc) + dt.timedelta(days=i),
            ntz=dt.datetime(2262, 4, 11, 23, 47, 16, 854775) - dt.timedelta(days=i),
            nested=None
            if i == 4
            else Row(
                x=Decimal("0.000000000000000001") * i, when=dt.datetime(2024, 2, 29, tzinfo=utc)
            ),
            arr=[Row(x=Decimal(i), when=None)],
            m={"a": Decimal("1.25"), f"k{i}": None},
        )
        for i in range(10)
    ]
    df = spark.createDataFrame(rows, schema)
    _write(df, endpoint, seg, encoding=encoding, rows_per_event="3")
    back = _read(spark, endpoint, seg)
    assert back.schema == schema
    assert sorted(back.collect(), key=lambda r: r.id) == sorted(df.collect(), key=lambda r: r.id)


def test_raw_records_and_offset_columns(spark: Any, endpoint: str, seg: str) -> None:
    _write(_df(spark, 25_000, partitions=1), endpoint, seg, rows_per_event="10000")
    raw = _read(spark, endpoint, seg, output="raw").orderBy("offset").collect()
    assert next(r.offset for r in raw) == 0
    assert all(a.next_offset == b.offset for a, b in itertools.pairwise(raw))
    recs = _read(spark, endpoint, seg, output="records").orderBy("offset").collect()
    assert [r.headers["spark.rows"] for r in recs] == [b"10000", b"10000", b"5000"]
    rows = _read(spark, endpoint, seg, offset_columns="true")
    assert rows.columns[-2:] == ["_segment", "_offset"]
    per_event = rows.groupBy("_offset").count().orderBy("_offset").collect()
    assert [(r["_offset"], r["count"]) for r in per_event] == [
        (r.offset, n) for r, n in zip(raw, [10000, 10000, 5000], strict=True)
    ]
    # a user schema: a subset of the columns, by name
    sub = (
        spark.read.format("segmentstore")
        .schema("s STRING, id BIGINT")
        .option("endpoint", endpoint)
        .option("segment", seg)
        .load()
    )
    assert sub.columns == ["s", "id"]
    assert sub.where("id = 12345").first().s == "row-12345"


def test_several_segments(spark: Any, endpoint: str, seg: str) -> None:
    segs = f"{seg}a,{seg}b,{seg}c"
    df = _df(spark, 30_000, partitions=3)
    df.write.format("segmentstore").option("endpoint", endpoint).option("segments", segs).mode(
        "append"
    ).save()
    with sync.connect(endpoint) as c:
        assert all(c.segment_info(s).length > 0 for s in segs.split(","))
    back = (
        spark.read.format("segmentstore")
        .option("endpoint", endpoint)
        .option("segments", segs)
        .load()
    )
    assert back.rdd.getNumPartitions() == 3
    _assert_exactly(back, 30_000)


def test_foreach_partition_helper(spark: Any, endpoint: str, seg: str) -> None:
    from segmentstore_client.spark.foreach import partition_writer

    df = _df(spark, 20_000)
    df.foreachPartition(partition_writer(endpoint, seg, schema=df.schema, rows_per_event=3000))
    back = _read(spark, endpoint, seg)
    assert back.schema == df.schema
    assert back.exceptAll(df).count() == 0 and df.exceptAll(back).count() == 0


def test_bad_options_fail_on_the_driver(spark: Any, endpoint: str) -> None:
    df = _df(spark, 10)
    with pytest.raises(Exception, match="segment"):
        df.write.format("segmentstore").option("endpoint", endpoint).mode("append").save()
    with pytest.raises(Exception, match=r"'atomc' is unknown.*did you mean 'atomic'"):
        df.write.format("segmentstore").option("endpoint", endpoint).option("segment", "x").option(
            "atomc", "true"
        ).mode("append").save()
