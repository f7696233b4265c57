"""Structured Streaming: the segmentstore source and sink across failures and restarts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spark


def _append(spark: Any, endpoint: str, segs: str, lo: int, hi: int) -> None:
    (
        spark.range(lo, hi, 1, 2)
        .selectExpr("id", "concat('v', cast(id as string)) as v")
        .write.format("segmentstore")
        .option("endpoint", endpoint)
        .option("segments", segs)
        .option("rows_per_event", "5000")
        .mode("append")
        .save()
    )


def _query(spark: Any, endpoint: str, src: str, dst: str, ckpt: Path, fmt: str, **opts: str) -> Any:
    stream = (
        spark.readStream.format("segmentstore")
        .option("endpoint", endpoint)
        .option("segments", src)
        .load()
    )
    w = (
        stream.writeStream.format(fmt)
        .option("endpoint", endpoint)
        .option("segment", dst)
        .option("rows_per_event", "4000")
        .option("checkpointLocation", str(ckpt))
    )
    for k, v in opts.items():
        w = w.option(k, v)
    return w.start()


def test_stream_restart_from_checkpoint_yields_each_row_once(
    spark: Any, endpoint: str, seg: str, tmp_path: Path
) -> None:
    src, dst, ckpt = f"{seg}-a,{seg}-b", f"{seg}-out", tmp_path / "ckpt"
    _append(spark, endpoint, src, 0, 20_000)

    q = _query(spark, endpoint, src, dst, ckpt, "segmentstore")
    q.processAllAvailable()
    q.stop()

    # New data; the next micro-batch fails on every attempt once 4000 rows of partition 0
    # are durable in the sink, so the query dies with a half-written batch ...
    _append(spark, endpoint, src, 20_000, 50_000)
    flag = tmp_path / "fail"
    flag.write_text("on")
    q = _query(
        spark,
        endpoint,
        src,
        dst,
        ckpt,
        "segmentstore_faulty",
        fail_flag=str(flag),
        fail_attempts="all",
        fail_partition="0",
        fail_after_rows="4000",
    )
    with pytest.raises(Exception, match="Writing job failed"):
        q.processAllAvailable()
    q.stop()

    # ... and a restart from the checkpoint replays that batch: nothing twice, nothing lost.
    flag.unlink()
    q = _query(spark, endpoint, src, dst, ckpt, "segmentstore")
    q.processAllAvailable()
    _append(spark, endpoint, src, 50_000, 60_000)  # the source keeps tailing
    q.processAllAvailable()
    q.stop()

    out = (
        spark.read.format("segmentstore").option("endpoint", endpoint).option("segment", dst).load()
    )
    row = out.selectExpr(
        "count(*) as c", "count(distinct id) as u", "min(id) as lo", "max(id) as hi"
    ).first()
    assert (row.c, row.u, row.lo, row.hi) == (60_000, 60_000, 0, 59_999)
    assert out.where("v != concat('v', cast(id as string))").count() == 0


def test_available_now_and_max_bytes(spark: Any, endpoint: str, seg: str, tmp_path: Path) -> None:
    src = f"{seg}-in"
    _append(spark, endpoint, src, 0, 30_000)
    batches: list[int] = []

    def collect(df: Any, batch_id: int) -> None:
        batches.append(df.count())

    q = (
        spark.readStream.format("segmentstore")
        .option("endpoint", endpoint)
        .option("segment", src)
        .option("max_bytes_per_trigger", "1")  # at least one event per batch
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "c"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(120)
    assert sum(batches) == 30_000
    assert max(batches) == 5000  # one 5000-row event per micro-batch
