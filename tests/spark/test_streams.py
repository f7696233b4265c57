"""``option("stream", ...)``: batch writes in transactions with routing keys, reads
between stream cuts, the streaming source across a scale and the sink to a stream,
against a real ``serve`` with its controller.

``SPARK_STREAMS_BIG=1`` writes and reads the issue's 1 M rows instead of 30,000.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from controller.conftest import controller_uri  # tests/controller/conftest.py
from segmentstore_client import sync
from segmentstore_client.spark.options import OptionError, ReadOptions, WriteOptions
from segmentstore_client.streams import StreamCut
from segmentstore_client.streams.controller_client import segment_name
from segmentstore_client.streams.routing import KeyRanges, key_hash

from segmentstore.server.launcher import ServerProcess

pytestmark = pytest.mark.spark

ROWS = 1_000_000 if os.environ.get("SPARK_STREAMS_BIG") == "1" else 30_000


@pytest.fixture(scope="module")
def ctl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    s = ServerProcess(
        tmp_path_factory.mktemp("spark-streams"),
        extra_args=["--controller-port", "0", "--fsync", "never"],
        http_port=-1,
    )
    s.start()
    yield s
    s.kill()


@pytest.fixture(scope="module")
def ep(ctl_server: ServerProcess) -> dict[str, str]:
    return {"endpoint": ctl_server.endpoint, "controller": controller_uri(ctl_server)}


@pytest.fixture(scope="module")
def admin(ep: dict[str, str]) -> Iterator[sync.SyncClient]:
    client = sync.connect(ep["endpoint"], controller=ep["controller"])
    client.create_scope("sp", exist_ok=True)
    yield client
    client.close()


def new_stream(admin: sync.SyncClient, segments: int) -> str:
    name = f"sp/s{uuid.uuid4().hex[:10]}"
    admin.create_stream(name, segments)
    return name


def write(spark: Any, ep: dict[str, str], stream: str, df: Any, fmt: str = "segmentstore",
          **opts: str) -> None:  # fmt: skip
    w = df.write.format(fmt).options(**ep).option("stream", stream).option("rowsPerEvent", "2000")
    w.options(**opts).mode("append").save()


def read(spark: Any, ep: dict[str, str], stream: str, **opts: str) -> Any:
    return spark.read.format("segmentstore").options(**ep).option("stream", stream).options(**opts)


def keyed(spark: Any, lo: int, hi: int, parts: int = 3) -> Any:
    """Rows with a key per id % 37, and a null key for every 50th row."""
    return spark.range(lo, hi, 1, parts).selectExpr(
        "id", "if(id % 50 = 0, null, concat('k', cast(id % 37 as string))) as key"
    )


def test_routing_key_write_reads_back_exactly_in_key_order(
    spark: Any, ep: dict[str, str], admin: sync.SyncClient
) -> None:
    stream = new_stream(admin, 4)
    # 50 rows per event: each task's 200 keyless rows make 4 events on random segments, 12 in
    # all, so "spread over more than one segment" fails by chance with odds of 4 ** -11 (with
    # 2,000 rows per event it was 3 events, and 1 run in 16 failed).
    write(spark, ep, stream, keyed(spark, 0, ROWS), routingKeyColumn="key", rowsPerEvent="50")

    rows = read(spark, ep, stream, offsetColumns="true", minPartitions="1").load()
    got = rows.select("_stream", "_segment", "_offset", "id", "key").collect()
    assert sorted(r.id for r in got) == list(range(ROWS))  # exactly once
    assert {r._stream for r in got} == {stream}

    info = admin.stream_info(stream)
    ranges = KeyRanges(list(info.epochs[0]))
    scope, name = stream.split("/")
    seg_of = {segment_name(scope, name, r.segment): r.segment for r in info.epochs[0]}
    last: dict[str, int] = {}
    keyless: set[str] = set()
    for r in got:  # one input partition per segment: rows in stream order
        if r.key is None:
            keyless.add(r._segment)
            continue
        # each key in the segment the official clients route it to, in write order
        assert seg_of[r._segment] == ranges.route(key_hash(r.key)), r
        assert r.id > last.get(r.key, -1), f"key {r.key}: {r.id} after {last[r.key]}"
        last[r.key] = r.id
    assert len(keyless) > 1  # null keys spread over segments


def test_binary_keys_and_no_key_column(
    spark: Any, ep: dict[str, str], admin: sync.SyncClient
) -> None:
    from pyspark.sql import functions as F

    stream = new_stream(admin, 2)
    df = spark.range(0, 4000, 1, 2).selectExpr("id", "cast(concat('b', id % 5) as binary) as k")
    write(spark, ep, stream, df, routingKeyColumn="k")
    write(spark, ep, stream, spark.range(4000, 6000, 1, 2))  # no key column: keyless
    back = read(spark, ep, stream, offsetColumns="true").load()
    assert sorted(r.id for r in back.select("id").collect()) == list(range(6000))
    segs = (
        back.where("k is not null")
        .groupBy("k")
        .agg(F.countDistinct("_segment").alias("n"), F.count("*").alias("c"))
    )
    assert sorted((r.n, r.c) for r in segs.collect()) == [(1, 800)] * 5


@pytest.mark.parametrize("hard", [False, True])
def test_task_failure_mid_write_no_duplicate_no_loss(
    spark: Any, ep: dict[str, str], admin: sync.SyncClient, tmp_path: Path, hard: bool
) -> None:
    stream = new_stream(admin, 4)
    log = tmp_path / "commits.jsonl"
    write(
        spark,
        ep,
        stream,
        keyed(spark, 0, 40_000, 2),  # Arrow batches of 10,000 rows
        fmt="segmentstore_faulty",
        routingKeyColumn="key",
        fail_partition="1",
        fail_after_rows="10000",
        fail_hard=str(hard).lower(),
        commit_log=str(log),
    )
    ids = [r.id for r in read(spark, ep, stream).load().select("id").collect()]
    assert sorted(ids) == list(range(40_000))
    msgs = [json.loads(line) for line in log.read_text().splitlines()]
    assert sorted(m["partition"] for m in msgs) == [0, 1]
    assert [m["attempt"] for m in msgs if m["partition"] == 1] == [1]  # the retry won
    # The failed attempt's transaction: aborted by the attempt itself (its segments are
    # gone), or, when its process died, still open (invisible) until its lease ends.
    left = [s for s in admin.list_segments(stream + "/") if "#transaction." in s]
    assert len(left) == (4 if hard else 0), left


def test_reads_between_stream_cuts(spark: Any, ep: dict[str, str], admin: sync.SyncClient) -> None:
    stream = new_stream(admin, 2)
    cuts = [admin.stream_info(stream).tail]
    for lo in (0, 1000, 2000):
        write(spark, ep, stream, keyed(spark, lo, lo + 1000, 2), routingKeyColumn="key")
        cuts.append(admin.stream_info(stream).tail)
    admin.scale_stream(stream, 3)  # the third range spans a scale
    write(spark, ep, stream, keyed(spark, 3000, 4000, 2), routingKeyColumn="key")

    def ids(**opts: str) -> list[int]:
        return sorted(r.id for r in read(spark, ep, stream, **opts).load().collect())

    assert ids() == list(range(4000))
    assert ids(endStreamCut=cuts[1].to_json()) == list(range(1000))
    assert ids(startStreamCut=cuts[1].to_json(), endStreamCut=cuts[2].to_json()) == list(
        range(1000, 2000)
    )
    assert ids(startStreamCut=cuts[3].to_json()) == list(range(3000, 4000))
    assert ids(startStreamCut=cuts[2].to_json()) == list(range(2000, 4000))


def test_streaming_source_across_scale_into_stream_sink(
    spark: Any, ep: dict[str, str], admin: sync.SyncClient, tmp_path: Path
) -> None:
    src, dst = new_stream(admin, 2), new_stream(admin, 3)
    write(spark, ep, src, keyed(spark, 0, 3000, 2), routingKeyColumn="key")
    q = (
        spark.readStream.format("segmentstore")
        .options(**ep)
        .option("stream", src)
        .load()
        .writeStream.format("segmentstore")
        .options(**ep)
        .option("stream", dst)
        .option("routingKeyColumn", "key")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .start()
    )
    try:
        q.processAllAvailable()
        new = admin.scale_stream(src, 3)  # 2 -> 3 segments
        assert len(new) == 3
        write(spark, ep, src, keyed(spark, 3000, 6000, 2), routingKeyColumn="key")
        q.processAllAvailable()
    finally:
        q.stop()
    ids = sorted(r.id for r in read(spark, ep, dst).load().select("id").collect())
    assert ids == list(range(6000))
    assert len(admin.stream_info(src).epochs) == 2


def test_sink_batch_at_or_below_marker_writes_nothing(
    ep: dict[str, str], admin: sync.SyncClient
) -> None:
    import pyarrow as pa
    from segmentstore_client.spark.stream_write import (
        StreamJob,
        commit_stream_write,
        prepare_stream,
        write_stream_partition,
    )

    stream = new_stream(admin, 2)
    opts = WriteOptions.parse({**ep, "stream": stream})
    prepare_stream(opts, marker=True)
    batch = pa.RecordBatch.from_pydict({"id": pa.array(range(100), pa.int64())})
    job = StreamJob(opts, "", "stream|q1", 5)
    msg = write_stream_partition(job, 0, 0, [batch], query_id="q1", batch_id=5)
    assert not msg.skipped and msg.rows == 100
    assert commit_stream_write(job, [msg]) == 1
    assert commit_stream_write(job, [msg]) == 0  # batch 5 committed: the replay aborts
    for seq in (4, 5):
        again = write_stream_partition(StreamJob(opts, "", "stream|q1", seq), 0, 0, [batch])
        assert again.skipped and again.txn_id == ""
    total = sum(s.events for s in admin.stream_info(stream).segments.values())
    assert total == 1


def test_replay_after_a_driver_died_mid_commit_lands_once(
    ep: dict[str, str], admin: sync.SyncClient
) -> None:
    import asyncio

    import pyarrow as pa
    import segmentstore_client as ss
    from segmentstore_client.spark import stream_intent
    from segmentstore_client.spark.stream_write import (
        StreamJob,
        _end,
        commit_stream_write,
        marker_segment,
        prepare_stream,
        write_stream_partition,
    )

    stream = new_stream(admin, 2)
    opts = WriteOptions.parse({**ep, "stream": stream})
    prepare_stream(opts, marker=True)
    job = StreamJob(opts, "", "stream|q2", 7)

    def part(p: int, lo: int) -> Any:
        batch = pa.RecordBatch.from_pydict({"id": pa.array(range(lo, lo + 50), pa.int64())})
        return write_stream_partition(job, p, 0, [batch], query_id="q2", batch_id=7)

    first = [part(0, 0), part(1, 50)]

    async def die_mid_commit() -> None:  # the first driver: intent recorded, one commit
        async with ss.connect(ep["endpoint"], controller=ep["controller"]) as c:
            ids = [(m.high, m.low) for m in first]
            await stream_intent.record(c, marker_segment(stream), "stream|q2", 7, ids)
            await _end(c, first[0], "commitTransaction")

    asyncio.run(die_mid_commit())
    replay = [part(0, 1000), part(1, 1050)]  # Spark replays batch 7: new transactions
    assert commit_stream_write(job, replay) == 2  # the recorded two, not the replay's
    total = sum(s.events for s in admin.stream_info(stream).segments.values())
    assert total == 2  # one event per partition of the first run, each once
    left = [s for s in admin.list_segments(stream + "/") if "#transaction." in s]
    assert left == []  # the replay's transactions were aborted


def test_stream_options_refused_with_one_line(ep: dict[str, str]) -> None:
    with pytest.raises(OptionError, match="either 'stream' or 'segment'"):
        ReadOptions.parse({**ep, "stream": "a/b", "segment": "x"})
    with pytest.raises(OptionError, match="routingKeyColumn' needs 'stream'"):
        WriteOptions.parse({**ep, "segment": "x", "routingKeyColumn": "k"})
    with pytest.raises(OptionError, match="scope/stream"):
        ReadOptions.parse({**ep, "stream": "nostream"})
    cut = StreamCut("a/c", {0: 5}).to_json()
    with pytest.raises(OptionError, match="a cut of 'a/c'"):
        ReadOptions.parse({**ep, "stream": "a/b", "startStreamCut": cut})
    with pytest.raises(OptionError, match="not a stream cut"):
        ReadOptions.parse({**ep, "stream": "a/b", "endStreamCut": "{}"})


def test_stream_write_errors(spark: Any, ep: dict[str, str], admin: sync.SyncClient) -> None:
    stream = new_stream(admin, 1)
    df = spark.range(10)
    with pytest.raises(Exception, match="a stream is appended to"):
        df.write.format("segmentstore").options(**ep).option("stream", stream).mode(
            "overwrite"
        ).save()
    with pytest.raises(Exception, match="routingKeyColumn 'nope' is not a column"):
        write(spark, ep, stream, df, routingKeyColumn="nope")
    with pytest.raises(Exception, match="has no open segment"):
        write(spark, ep, "sp/missing-stream", df)
