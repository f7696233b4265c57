"""The ``recordFormat`` option: DataFrames written and read as Kafka messages and
namespaced events, one record per event, checked with the SDK's decoders."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from segmentstore_client import sync
from segmentstore_client.formats import events, kafka
from segmentstore_client.spark.options import OptionError, WriteOptions

pytestmark = pytest.mark.spark

UTC = dt.UTC


def _read(spark: Any, endpoint: str, seg: str, fmt: str) -> list[Any]:
    return (
        spark.read.format("segmentstore")
        .option("endpoint", endpoint)
        .option("segment", seg)
        .option("output", "records")
        .option("recordFormat", fmt)
        .load()
        .orderBy("offset")
        .collect()
    )


def test_kafka_rows_round_trip(spark: Any, endpoint: str, seg: str) -> None:
    t0 = dt.datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=UTC)
    rows = [
        (b"k%d" % i if i % 2 else None, b"value-%d" % i, t0 + dt.timedelta(seconds=i))
        for i in range(20)
    ]
    df = spark.createDataFrame(rows, "key BINARY, value BINARY, timestamp TIMESTAMP").coalesce(1)
    (
        df.write.format("segmentstore")
        .option("endpoint", endpoint)
        .option("segment", seg)
        .option("recordFormat", "kafka")
        .mode("append")
        .save()
    )
    with sync.connect(endpoint) as c:
        stored = [kafka.decode_message(e.data) for e in c.reader(seg)]
    assert [(m.key, m.value, m.timestamp, m.magic) for m in stored] == [
        (k, v, int(t.timestamp() * 1000), 1) for k, v, t in rows
    ]
    got = _read(spark, endpoint, seg, "kafka")
    assert [(r.key, r.value, r.timestamp.replace(tzinfo=UTC), r.headers) for r in got] == [
        (k, v, t, {}) for k, v, t in rows
    ]


def test_events_read_with_their_header_fields(spark: Any, endpoint: str, seg: str) -> None:
    with sync.connect(endpoint) as c:
        c.create_segment(seg)
        with c.writer(seg) as w:
            w.write(events.encode_event("ping", b"p1", id=5, namespace="health"))
            w.write(events.encode_event("pong", b"", id=6, ref_id=5))
    got = _read(spark, endpoint, seg, "events")
    assert [(r.value, r.timestamp, dict(r.headers)) for r in got] == [
        (b"p1", None, {"name": b"ping", "id": b"5", "namespace": b"health"}),
        (b"", None, {"name": b"pong", "id": b"6", "ref_id": b"5"}),
    ]


def test_damaged_event_and_bad_option_are_named_errors(spark: Any, endpoint: str, seg: str) -> None:
    with pytest.raises(OptionError, match="recordFormat"):
        WriteOptions.parse({"endpoint": endpoint, "segment": seg, "recordFormat": "avro"})
    with sync.connect(endpoint) as c:
        c.create_segment(seg)
        with c.writer(seg) as w:
            w.write(b"not a kafka message")
    with pytest.raises(Exception, match="event at offset 0"):
        _read(spark, endpoint, seg, "kafka")


def test_foreach_partition_writer_honours_record_format(
    spark: Any, endpoint: str, seg: str
) -> None:
    from segmentstore_client.spark.foreach import partition_writer

    t0 = dt.datetime(2024, 5, 1, 12, 0, 0, 250000, tzinfo=UTC)
    rows = [(b"k%d" % i, f"text-{i}", t0 + dt.timedelta(seconds=i)) for i in range(12)]
    df = spark.createDataFrame(rows, "key BINARY, value STRING, timestamp TIMESTAMP").coalesce(1)
    df.foreachPartition(partition_writer(endpoint, seg, record_format="kafka"))
    with sync.connect(endpoint) as c:
        stored = [kafka.decode_message(e.data) for e in c.reader(seg)]
    assert [(m.key, m.value, m.timestamp) for m in stored] == [
        (k, v.encode(), int(t.timestamp() * 1000)) for k, v, t in rows
    ]
    got = _read(spark, endpoint, seg, "kafka")
    assert [r.value for r in got] == [v.encode() for _, v, _ in rows]
    with pytest.raises(OptionError, match="recordFormat"):
        partition_writer(endpoint, seg, record_format="avro")
