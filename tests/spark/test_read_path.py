"""The read path's speed-relevant contracts: Arrow batches handed to Spark are joined
across events (``batchRows``), and column pruning decodes only the requested columns."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from segmentstore_client.spark.codec import ArrowEncoder, decode_arrow
from segmentstore_client.spark.options import ReadOptions
from segmentstore_client.spark.reader import SegmentStoreReader, coalesce, infer_schema

pytestmark = pytest.mark.spark


def _batch(start: int, n: int) -> pa.RecordBatch:
    ids = pa.array(range(start, start + n), pa.int64())
    return pa.RecordBatch.from_arrays([ids, pc.cast(ids, pa.string())], ["id", "s"])


def test_coalesce_joins_in_order_and_keeps_the_tail() -> None:
    parts = [_batch(0, 1000), _batch(1000, 0), _batch(1000, 1000), _batch(2000, 1000)]
    parts += [_batch(3000, 500)]
    out = list(coalesce(parts, 2000))
    assert [b.num_rows for b in out] == [2000, 1500]
    ids = [i for b in out for i in b.column("id").to_pylist()]
    assert ids == list(range(3500))
    # a batch already large enough goes through as it is (no copy)
    big = _batch(0, 5000)
    assert next(coalesce([big], 2000)) is big
    assert list(coalesce([], 10)) == []


def test_coalesce_stops_at_the_byte_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    from segmentstore_client.spark import reader

    one = _batch(0, 100)
    monkeypatch.setattr(reader, "MAX_BATCH_BYTES", one.nbytes * 2)
    out = list(coalesce([_batch(i * 100, 100) for i in range(5)], 1 << 20))
    assert [b.num_rows for b in out] == [200, 200, 100]


def test_pruned_columns_are_not_decompressed() -> None:
    n = 200_000
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array(range(n), pa.int64()),
            pa.array([f"user-{i % 977}-padding" for i in range(n)], pa.string()),
            pa.array([i * 0.5 for i in range(n)], pa.float64()),
        ],
        ["id", "name", "amount"],
    )
    payload = ArrowEncoder(batch.schema, compression="zstd").encode([batch])
    base = pa.total_allocated_bytes()
    _, every = decode_arrow(payload)
    all_bytes = pa.total_allocated_bytes() - base
    del every
    base = pa.total_allocated_bytes()
    schema, only = decode_arrow(payload, frozenset({"id"}))
    one_bytes = pa.total_allocated_bytes() - base
    assert only[0].schema.names == ["id"] and only[0].column(0).to_pylist()[:3] == [0, 1, 2]
    assert schema.names == ["id"]
    # only the id column's buffers were decompressed: well under half of all three
    assert 0 < one_bytes < all_bytes / 3, (one_bytes, all_bytes)


def test_a_spark_read_hands_over_batches_of_batch_rows(spark: Any, endpoint: str, seg: str) -> None:
    df = spark.range(0, 25_000, 1, 1).selectExpr("id", "cast(id as string) as s")
    (
        df.write.format("segmentstore")
        .option("endpoint", endpoint)
        .option("segment", seg)
        .option("rowsPerEvent", "1000")
        .mode("append")
        .save()
    )
    opts = ReadOptions.parse(
        {"endpoint": endpoint, "segment": seg, "batchRows": "6000", "minPartitions": "1"}
    )
    reader = SegmentStoreReader(opts, infer_schema(opts))
    parts = reader.partitions()
    batches = [b for p in parts for b in reader.read(p)]
    assert [b.num_rows for b in batches] == [6000, 6000, 6000, 6000, 1000]
    assert [i for b in batches for i in b.column("id").to_pylist()] == list(range(25_000))
    default = SegmentStoreReader(ReadOptions.parse({"endpoint": endpoint, "segment": seg}), None)
    assert default.options.batch_rows == 10_000
    # through Spark, with pruning: the same rows
    back = (
        spark.read.format("segmentstore")
        .option("endpoint", endpoint)
        .option("segment", seg)
        .option("batchRows", "6000")
        .option("columns", "id")
        .load()
    )
    assert back.columns == ["id"]
    assert back.agg({"id": "sum"}).first()[0] == sum(range(25_000))
