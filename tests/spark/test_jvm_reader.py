"""The ``segmentstore-jvm`` reader (Java, DataSource V2, columnar) on a real local Spark.

Rows are written by the Python sink (``segmentstore``) and read back through the JVM
reader, whose jar ``segmentstore_client.spark.jvm.jar_path()`` builds with the JDK's
``javac`` (``tests/spark/conftest.py`` puts it on ``spark.jars``); without a JDK these
tests are skipped.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from segmentstore_client import records, sync
from segmentstore_client.spark.jvm import FORMAT, JvmBuildError, jar_path

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("jvm_jar")]  # conftest: skip without a JDK


def _six(spark: Any, n: int) -> Any:
    """The benchmark's six column types, with nulls in every nullable column."""
    return spark.range(0, n, 1, 2).selectExpr(
        "id",
        "if(id % 11 = 0, null, cast(id % 1000 as int)) as i",
        "if(id % 13 = 0, null, concat('row-', cast(id as string))) as s",
        "if(id % 17 = 0, null, cast(id as double) / 7) as d",
        "if(id % 19 = 0, null, timestamp_micros(1700000000000000 + id * 1001)) as ts",
        "if(id % 23 = 0, null, cast(id / 100 as decimal(18,2))) as dec",
    )


def _write(df: Any, endpoint: str, seg: str, **opts: str) -> None:
    w = df.write.format("segmentstore").option("endpoint", endpoint).option("segment", seg)
    for k, v in opts.items():
        w = w.option(k, v)
    w.mode("append").save()


def _jvm(spark: Any, endpoint: str, seg: str, **opts: str) -> Any:
    r = spark.read.format(FORMAT).option("endpoint", endpoint).option("segment", seg)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def _plan(df: Any) -> str:
    return str(df._jdf.queryExecution().executedPlan().toString())


def _error(read: Callable[[], Any]) -> str:
    """The message of the error ``read().collect()`` fails with (on the driver or a task)."""
    with pytest.raises(Exception) as err:
        read().collect()
    return str(err.value)


def test_reads_what_the_sink_wrote_as_columnar_batches(spark: Any, endpoint: str, seg: str) -> None:
    n = 20_000
    _write(_six(spark, n), endpoint, seg, rowsPerEvent="2000")  # 10 events
    df = _jvm(spark, endpoint, seg, partitionBytes="65536")
    plan = _plan(df)
    assert "BatchScan" in plan and "ColumnarToRow" in plan, plan  # Spark reads it columnar
    assert df.rdd.getNumPartitions() >= 3  # a multi-event segment cut at event boundaries
    assert df.schema == _six(spark, 1).schema  # inferred from the stored Spark schema
    got = sorted(df.collect())
    assert got == sorted(_six(spark, n).collect())
    python = spark.read.format("segmentstore").option("endpoint", endpoint)
    assert got == sorted(python.option("segment", seg).load().collect())


def test_column_pruning(spark: Any, endpoint: str, seg: str) -> None:
    _write(_six(spark, 5_000), endpoint, seg, rowsPerEvent="1000")
    df = _jvm(spark, endpoint, seg).select("dec", "id").where("id >= 4990")
    assert "ReadSchema: struct<id:bigint,dec:decimal(18,2)>" in _plan(df), _plan(df)
    assert sorted((r.id, r.dec and str(r.dec)) for r in df.collect()) == [
        (i, None if i % 23 == 0 else f"{i // 100}.{i % 100:02d}") for i in range(4990, 5000)
    ]
    only = _jvm(spark, endpoint, seg, columns="s")
    assert only.columns == ["s"] and only.where("s = 'row-42'").count() == 1
    # a user schema: a subset by name, a column the rows lack reads as null
    sub = (
        spark.read.format(FORMAT)
        .schema("s STRING, id BIGINT, extra INT")
        .option("endpoint", endpoint)
        .option("segment", seg)
        .load()
    )
    assert sub.where("id = 7").first().asDict() == {"s": "row-7", "id": 7, "extra": None}
    # reading a column as another type is refused (the Python source widens losslessly)
    wide = spark.read.format(FORMAT).schema("i BIGINT").option("endpoint", endpoint)
    msg = _error(lambda: wide.option("segment", seg).load())
    assert "column 'i' holds int" in msg and "format('segmentstore')" in msg


def test_a_damaged_record_fails_naming_the_segment(spark: Any, endpoint: str, seg: str) -> None:
    _write(_six(spark, 3_000), endpoint, seg, rowsPerEvent="1000")
    good = _jvm(spark, endpoint, seg).count()
    assert good == 3_000
    with sync.connect(endpoint) as c:
        reader = c.reader(seg, 0)
        first = reader.read_batch()[0].data
        reader.close()
        bad = bytearray(first)
        bad[len(bad) // 2] ^= 0x01  # one flipped bit inside the Arrow payload
        with c.writer(seg) as w:
            w.write(bytes(bad))
    msg = _error(lambda: _jvm(spark, endpoint, seg))
    assert f"segment '{seg}'" in msg and "CRC-32C mismatch" in msg, msg


def test_a_refused_connection_fails_fast(spark: Any) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    msg = _error(lambda: _jvm(spark, f"tcp://127.0.0.1:{port}", "x/y/0", connectTimeout="2"))
    assert "cannot connect to 127.0.0.1" in msg, msg
    assert time.monotonic() - t0 < 15
    with socket.socket() as silent:  # accepts (the kernel's backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        ep = f"tcp://127.0.0.1:{silent.getsockname()[1]}"
        t0 = time.monotonic()
        msg = _error(lambda: _jvm(spark, ep, "x/y/0", schema="id BIGINT", timeout="1"))
        assert "no reply from 127.0.0.1" in msg and "within 1000 ms" in msg, msg
        assert time.monotonic() - t0 < 15


def test_what_only_the_python_source_reads_is_refused(spark: Any, endpoint: str, seg: str) -> None:
    _write(_six(spark, 100), endpoint, seg + "m", encoding="msgpack")
    msg = _error(lambda: _jvm(spark, endpoint, seg + "m", schema="id BIGINT"))
    assert "MessagePack" in msg and "format('segmentstore')" in msg, msg
    with sync.connect(endpoint) as c:
        c.create_segment(seg + "r")
        with c.writer(seg + "r") as w:
            w.write(b"plain bytes, not a record at all")
    msg = _error(lambda: _jvm(spark, endpoint, seg + "r", schema="id BIGINT"))
    assert "raw events" in msg and "'output', 'raw'" in msg, msg
    for opt, value in [("stream", "a/b"), ("credentials", "u:p"), ("output", "raw")]:
        bad = {"schema": "id BIGINT", opt: value}
        msg = _error(lambda bad=bad: _jvm(spark, endpoint, seg + "m", **bad))
        assert "segmentstore-jvm does not support" in msg, msg
    msg = _error(lambda: _jvm(spark, "tls://127.0.0.1:1", seg, schema="id BIGINT"))
    assert "TLS" in msg
    msg = _error(lambda: _jvm(spark, endpoint, seg, schema="id BIGINT", atomicc="true"))
    assert "unknown option 'atomicc'" in msg and "endpoint" in msg, msg
    assert records.FORMAT_VERSION == 1  # the envelope version the Java reader checks


def test_jar_build_without_a_jdk_is_one_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    import zipfile

    from segmentstore_client.spark import jvm

    with zipfile.ZipFile(jar_path()) as z:  # the cached jar registers the short name
        service = "META-INF/services/org.apache.spark.sql.sources.DataSourceRegister"
        assert z.read(service).decode().strip() == "io.segmentstore.spark.SegmentStoreJvm"
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(jvm.CACHE_ENV, str(blocker))  # a cache that cannot be made
    with pytest.raises(JvmBuildError, match=r"cannot build the segmentstore-jvm jar in"):
        jar_path()
    monkeypatch.setenv(jvm.CACHE_ENV, str(tmp_path))  # nothing built here yet
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(JvmBuildError, match=r"needs a Java 17\+ JDK \(javac on PATH"):
        jar_path()


def test_other_types_nested_and_wide_decimals(spark: Any, endpoint: str, seg: str) -> None:
    import datetime as dt
    from decimal import Decimal

    df = spark.createDataFrame(
        [
            (
                i,
                i % 2 == 0,
                i,
                1.5 * i,
                bytes([i, 0, 255]),
                Decimal("-1234567890123456.7890") + i,
                dt.date(1969, 12, 31) + dt.timedelta(days=i),
                dt.datetime(2262, 4, 11, 23, 47, 16, 854775) - dt.timedelta(days=i),
                None if i == 4 else (Decimal(i) / 8, f"ünï {i}"),
                [(Decimal(i), None)],
                {"a": Decimal("1.25"), f"k{i}": None},
            )
            for i in range(10)
        ],
        "id BIGINT, b BOOLEAN, h SMALLINT, f FLOAT, bin BINARY, dec DECIMAL(20,4), day DATE, "
        "ntz TIMESTAMP_NTZ, nested STRUCT<x: DECIMAL(38,18), s: STRING>, "
        "arr ARRAY<STRUCT<x: DECIMAL(10,2), s: STRING>>, m MAP<STRING, DECIMAL(10,2)>",
    )
    _write(df, endpoint, seg, rowsPerEvent="3")
    back = _jvm(spark, endpoint, seg)
    assert back.schema == df.schema
    assert sorted(back.collect()) == sorted(df.collect())


def _planned(df: Any) -> Any:
    """``df`` with its query planned: Spark asks the scan for its input partitions while
    it prepares the physical plan, which ``df``'s later actions reuse."""
    df._jdf.queryExecution().executedPlan()
    return df


def _event_length(endpoint: str, seg: str) -> int:
    with sync.connect(endpoint) as c:
        reader = c.reader(seg, 0)
        try:
            return 8 + len(reader.read_batch()[0].data)
        finally:
            reader.close()


def test_a_segment_that_grew_after_planning(spark: Any, endpoint: str, seg: str) -> None:
    """A query reads the events its plan saw, whole; the next query plans anew (the scan's
    cached plan lives as long as one query, so a plan kept across queries fails here)."""
    _write(_six(spark, 4_000), endpoint, seg, rowsPerEvent="1000")  # 4 events
    df = _planned(_jvm(spark, endpoint, seg, partitionBytes="4096").select("id"))
    _write(_six(spark, 6_000).where("id >= 4000"), endpoint, seg, rowsPerEvent="1000")
    assert sorted(r.id for r in df.collect()) == list(range(4_000))
    assert df.count() == 6_000  # a new query: planned again, sees the new events
    assert df.where("id >= 3990").count() == 2_010


def test_a_segment_truncated_after_planning(spark: Any, endpoint: str, seg: str) -> None:
    _write(_six(spark, 3_000), endpoint, seg, rowsPerEvent="1000")
    df = _planned(_jvm(spark, endpoint, seg).select("id"))
    first = _event_length(endpoint, seg)
    gone = {r.id for r in _jvm(spark, endpoint, seg, endOffset=str(first)).select("id").collect()}
    assert 0 < len(gone) < 3_000
    with sync.connect(endpoint) as c:
        c.truncate(seg, first)  # the first event is gone
    msg = _error(lambda: df)
    assert f"segment '{seg}'" in msg and f"truncated at {first}" in msg, msg
    got = sorted(r.id for r in _jvm(spark, endpoint, seg).select("id").collect())
    assert got == sorted(set(range(3_000)) - gone)  # a new query plans from the new start


def test_a_server_that_dies_between_planning_and_reading(
    spark: Any, server_factory: Any, seg: str
) -> None:
    s = server_factory()
    s.start()
    _write(_six(spark, 2_000), s.endpoint, seg, rowsPerEvent="1000")
    df = _planned(_jvm(spark, s.endpoint, seg, connectTimeout="2", timeout="5").select("id"))
    assert _jvm(spark, s.endpoint, seg).count() == 2_000  # connections used and put back
    s.kill()
    t0 = time.monotonic()
    msg = _error(lambda: df)
    assert f"cannot connect to {s.endpoint.removeprefix('tcp://')}" in msg, msg
    assert time.monotonic() - t0 < 15
    s.restart()  # same port: connections kept from before the restart are dead
    assert _jvm(spark, s.endpoint, seg).count() == 2_000
    assert sorted(r.id for r in df.collect()) == list(range(2_000))


def test_an_overwrite_base_past_the_end_is_damage_not_an_empty_read(
    spark: Any, endpoint: str, seg: str
) -> None:
    """The overwrite base is set atomically with an overwrite's merge, so it never lies past
    the segment's end; a value there (a damaged attribute) must fail both readers with one
    line, not read as an empty segment. Broken once: without the check both read 0 rows."""
    from segmentstore_client.spark.options import BASE_ATTRIBUTE

    _write(_six(spark, 1_000), endpoint, seg)
    with sync.connect(endpoint) as c:
        length = c.segment_info(seg).length
        assert c.compare_and_set_attribute(seg, BASE_ATTRIBUTE, length + 4096, None)
    for read in (
        lambda: _jvm(spark, endpoint, seg),
        lambda: (
            spark.read.format("segmentstore")
            .option("endpoint", endpoint)
            .option("segment", seg)
            .load()
        ),
    ):
        msg = _error(read)
        assert f"overwrite base {length + 4096} lies outside [0, {length}]" in msg, msg
    with sync.connect(endpoint) as c:  # the honest base (the end) reads as empty
        assert c.compare_and_set_attribute(seg, BASE_ATTRIBUTE, length, length + 4096)
    assert _jvm(spark, endpoint, seg, schema="id bigint").count() == 0


def test_events_of_different_schemas_in_one_task(spark: Any, endpoint: str, seg: str) -> None:
    """One task reads events whose schemas differ (a repeated schema's mapping and checks
    are reused by comparing its bytes, session 10): each event is read by its own schema,
    including one of the same size whose only change is a column's name. Seen failing with
    either reuse made unconditional (a layout error, or b's values read as a's)."""
    parts = [
        spark.range(0, 3, 1, 1).selectExpr("cast(id as int) as a"),
        spark.range(10, 13, 1, 1).selectExpr("cast(id as int) as b"),
        spark.range(20, 23, 1, 1).selectExpr("cast(id as int) as b", "cast(id as string) as c"),
        spark.range(30, 33, 1, 1).selectExpr("cast(id as int) as a"),
    ]
    for df in parts:
        _write(df, endpoint, seg)
    df = _jvm(spark, endpoint, seg, schema="a int, b int, c string")
    assert df.rdd.getNumPartitions() == 1
    got = [tuple(r) for r in df.collect()]
    assert len(got) == 12 and set(got) == (
        {(i, None, None) for i in (0, 1, 2, 30, 31, 32)}
        | {(None, i, None) for i in (10, 11, 12)}
        | {(None, i, str(i)) for i in (20, 21, 22)}
    )


def _reader_threads(spark: Any) -> list[str]:
    """Names of the JVM's live decoding threads (``segmentstore-jvm <range>``)."""
    threads = spark._jvm.java.lang.Thread.getAllStackTraces().keySet().toArray()
    return [str(t.getName()) for t in threads if str(t.getName()).startswith("segmentstore-jvm ")]


def test_a_task_stopped_early_stops_its_decoding_thread(
    spark: Any, endpoint: str, seg: str
) -> None:
    """Each task decodes on a thread of its own, up to two batches ahead of Spark (session
    10). A query that stops reading early (``limit``) closes the reader with decoded
    batches still queued: close() must stop the thread and free their Arrow memory (the
    task's allocator refuses to close over a leak, which fails the query), and no thread
    may outlive its task. Seen failing with the queue not drained in close() (``Memory was
    leaked``) and with the thread not interrupted (close() waits 10 s and fails)."""
    _write(_six(spark, 20_000), endpoint, seg, rowsPerEvent="1000")  # 20 events
    df = _jvm(spark, endpoint, seg, partitionBytes=str(1 << 30), minPartitions="1")
    assert df.rdd.getNumPartitions() == 1
    assert len(df.limit(3).collect()) == 3
    deadline = time.monotonic() + 5
    while _reader_threads(spark) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _reader_threads(spark) == []
    assert df.count() == 20_000  # and the next query reads everything


def _arrow_events(endpoint: str, seg: str, ids: range, width: int) -> None:
    """Events as the sink writes them (Arrow IPC, zstd, record envelope), 1,000 rows each,
    written through the SDK: ``id`` and ``s``, a string of ``width`` random hex digits."""
    import os

    import pyarrow as pa
    from segmentstore_client.spark.codec import ArrowEncoder, arrow_headers

    enc = ArrowEncoder(pa.schema([("id", pa.int64()), ("s", pa.string())]), None, "zstd")
    with sync.connect(endpoint) as c:
        c.create_segment(seg)
        with c.writer(seg) as w:
            for lo in range(ids.start, ids.stop, 1000):
                part = range(lo, min(lo + 1000, ids.stop))
                s = [os.urandom(width // 2).hex() for _ in part]
                batch = pa.record_batch([pa.array(part, pa.int64()), pa.array(s)], ["id", "s"])
                w.write(records.encode(enc.encode([batch]), headers=arrow_headers(len(part))))


def test_tasks_reusing_read_arrays_each_read_their_own_bytes(
    spark: Any, endpoint: str, seg: str
) -> None:
    """Session 12: a task's event buffer and its 2 MiB read frames come from a pool
    (``Buffers``: arrays of 512 KiB or more are humongous objects in Spark's G1 heap, and
    allocating them started collections), given back once the task's decoding thread has
    stopped. Tasks running at the same time must never share an array, and a reused
    array's old bytes must never be read: two segments of 5 MB (incompressible strings, so
    each task makes several 2 MiB reads), read in one query as two tasks running together,
    three times over, return exactly their ids. Seen failing with ``take()`` leaving the
    array it hands out in the pool (a record CRC-32C mismatch, or the other task's rows)."""
    other = seg.replace("/0", "/1")
    _arrow_events(endpoint, seg, range(0, 10_000), 500)
    _arrow_events(endpoint, other, range(10_000, 20_000), 500)
    sc = spark.sparkContext
    group = f"buffers-{seg}"
    sc.setJobGroup(group, "tasks reusing read arrays")
    try:
        for _ in range(3):
            df = (
                spark.read.format(FORMAT)
                .option("endpoint", endpoint)
                .option("segments", f"{seg},{other}")
                .option("minPartitions", "1")
                .load()
            )
            assert df.rdd.getNumPartitions() == 2
            got = df.selectExpr(
                "min(id)", "max(id)", "count(id)", "count(distinct id)", "sum(length(s))"
            ).collect()[0]
            assert tuple(got) == (0, 19_999, 20_000, 20_000, 20_000 * 500)
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    # The session lets a task fail twice: a corrupt read retried would still pass above.
    tracker = sc.statusTracker()
    stages = [s for j in tracker.getJobIdsForGroup(group) for s in tracker.getJobInfo(j).stageIds]
    assert stages and sum(tracker.getStageInfo(s).numFailedTasks for s in stages) == 0
