"""The ``segmentstore-jvm`` writer (Java, DataSource V2) on a real local Spark.

Rows written through the JVM sink are read back by both readers (the Python source
``segmentstore`` and the JVM reader); identities, event numbers and pieces are the
Python sink's. The jar is built by ``segmentstore_client.spark.jvm.jar_path()`` and put
on ``spark.jars`` by ``tests/spark/conftest.py``; without a JDK these tests are skipped.
"""

from __future__ import annotations

import datetime as dt
import json
import socket
import time
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from segmentstore_client import records, sync
from segmentstore_client.spark.codec import decode_arrow
from segmentstore_client.spark.jvm import FORMAT
from segmentstore_client.spark.options import event_number, writer_id

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("jvm_jar")]  # conftest: skip without a JDK


def _df(spark: Any, n: int, partitions: int = 2) -> Any:
    return spark.range(0, n, 1, partitions).selectExpr(
        "id",
        "if(id % 11 = 0, null, cast(id % 1000 as int)) as i",
        "concat('row-', cast(id as string)) as s",
        "cast(id as double) / 7 as d",
        "if(id % 19 = 0, null, timestamp_micros(1700000000000000 + id * 1001)) as ts",
    )


def _save(df: Any, endpoint: str, seg: str, mode: str = "append", **opts: str) -> None:
    w = df.write.format(FORMAT).option("endpoint", endpoint).option("segment", seg)
    for k, v in opts.items():
        w = w.option(k, v)
    w.mode(mode).save()


def _python(spark: Any, endpoint: str, seg: str) -> Any:
    return spark.read.format("segmentstore").option("endpoint", endpoint).option("segment", seg)


def _jvm(spark: Any, endpoint: str, seg: str) -> Any:
    return spark.read.format(FORMAT).option("endpoint", endpoint).option("segment", seg)


def _report(spark: Any) -> list[dict[str, Any]]:
    """The last JVM write's partition commit messages (kept on the driver)."""
    msgs = json.loads(spark._jvm.io.segmentstore.spark.JvmWrite.lastReport())
    return sorted(msgs, key=lambda m: m["partition"])


def _events(endpoint: str, seg: str) -> list[records.Record]:
    with sync.connect(endpoint) as c:
        return [records.decode(e.data) for e in c.reader(seg)]


def _error(action: Callable[[], Any]) -> str:
    with pytest.raises(Exception) as err:
        action()
    return str(err.value)


def _fingerprint(df: Any) -> tuple[int, int, int]:
    row = df.selectExpr("count(*)", "count(distinct id)", "sum(hash(*))").first()
    return (row[0], row[1], row[2])


def _types(spark: Any) -> Any:
    """The types test_batch.py round-trips through the Python sink (14 kinds, nested)."""
    from pyspark.sql import Row

    utc = dt.UTC
    ddl = (
        "id BIGINT NOT NULL, i INT, h SMALLINT, b BOOLEAN, f FLOAT, d DOUBLE, s STRING, "
        "bin BINARY, dec DECIMAL(20,4), day DATE, ts TIMESTAMP, ntz TIMESTAMP_NTZ, "
        "nested STRUCT<x: DECIMAL(38,18), `when`: TIMESTAMP>, "
        "arr ARRAY<STRUCT<x: DECIMAL(38,18), `when`: TIMESTAMP>>, m MAP<STRING, DECIMAL(10,2)>"
    )
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
    return spark.createDataFrame(rows, ddl)


def test_every_type_round_trips_through_both_readers(spark: Any, endpoint: str, seg: str) -> None:
    df = _types(spark)
    _save(df, endpoint, seg, rowsPerEvent="3")
    want = sorted(df.collect(), key=lambda r: r.id)
    for back in (_python(spark, endpoint, seg).load(), _jvm(spark, endpoint, seg).load()):
        assert back.schema == df.schema
        assert sorted(back.collect(), key=lambda r: r.id) == want
    # The events are the Python sink's: Arrow IPC streams in records, Spark schema inside.
    events = _events(endpoint, seg)
    assert len(events) == 4  # 2 partitions of 5 rows, 3 rows per event
    for rec in events:
        assert rec.headers["content-type"] == b"application/vnd.apache.arrow.stream"
        schema, batches = decode_arrow(rec.value)
        assert int(rec.headers["spark.rows"]) == sum(b.num_rows for b in batches)
        assert b"spark.schema" in (schema.metadata or {})


@pytest.mark.parametrize("compression", ["zstd", "lz4", "none"])
def test_rows_written_by_the_jvm_read_back_exactly(
    spark: Any, endpoint: str, seg: str, compression: str
) -> None:
    n = 30_000
    df = _df(spark, n)
    _save(df, endpoint, seg, rowsPerEvent="4000", compression=compression)
    assert _fingerprint(_python(spark, endpoint, seg).load()) == _fingerprint(df)
    assert _fingerprint(_jvm(spark, endpoint, seg).load()) == _fingerprint(df)
    # Group k of a partition holds its rows k*R .. (k+1)*R - 1: 15,000 rows -> 4 events.
    events = _events(endpoint, seg)
    assert sorted(int(e.headers["spark.rows"]) for e in events) == [3000] * 2 + [4000] * 6
    msgs = _report(spark)
    assert [m["events"] for m in msgs] == [4, 4]
    assert [m["last_event_number"] for m in msgs] == [event_number(3)] * 2
    for p, m in enumerate(msgs):
        assert m["writer_id"] == str(writer_id(uuid.UUID(m["identity"]), seg, p))


def test_writer_ids_and_event_numbers_are_the_python_sinks(spark: Any) -> None:
    jw = spark._jvm.io.segmentstore.spark.JvmWrite
    for identity in (uuid.uuid4(), uuid.UUID("12345678-1234-5678-1234-567812345678")):
        for target, p in (("a/b/0", 0), ("scope/ünï/3", 7), ("x", 123456)):
            assert jw.writerIdOf(str(identity), target, p) == str(writer_id(identity, target, p))
    for group, piece in ((0, 0), (0, 1), (4, 0), (1 << 30, 5), (12345, 1 << 19)):
        assert jw.eventNumberOf(group, piece) == event_number(group, piece)
