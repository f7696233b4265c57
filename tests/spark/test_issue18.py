"""Issue 18: the defects found by trying the data source as a data engineer would, and
the conventions Spark users expect (save modes, options, partitioning, errors)."""

from __future__ import annotations

import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from segmentstore_client import sync
from segmentstore_client.errors import ConnectFailed, NoSuchSegment
from segmentstore_client.spark.commit import abort_write
from segmentstore_client.spark.options import WriteOptions, event_number, writer_id
from segmentstore_client.spark.writer import (
    Group,
    WriteFenced,
    WriteJob,
    arrow_groups,
    write_partition,
)

pytestmark = pytest.mark.spark


def _writer(df: Any, endpoint: str, seg: str, **opts: str) -> Any:
    w = df.write.format("segmentstore").option("endpoint", endpoint).option("segment", seg)
    for k, v in opts.items():
        w = w.option(k, v)
    return w


def _reader(spark: Any, endpoint: str, seg: str, **opts: str) -> Any:
    r = spark.read.format("segmentstore").option("endpoint", endpoint).option("segment", seg)
    for k, v in opts.items():
        r = r.option(k, v)
    return r


def _length(endpoint: str, seg: str) -> int:
    with sync.connect(endpoint) as c:
        return c.segment_info(seg).length


# --- defect 1: lossy casts ------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["arrow", "msgpack"])
def test_lossy_casts_are_refused_naming_the_column(
    spark: Any, endpoint: str, seg: str, encoding: str
) -> None:
    df = spark.range(20).selectExpr(
        "id",
        "cast(id as int) i",
        "timestamp_micros(1700000000123456 + id) ts",
        "cast(id as double) / 3 d",
    )
    _writer(df, endpoint, seg, encoding=encoding).mode("append").save()
    for ddl, col in [("id bigint, i boolean", "i"), ("ts date", "ts"), ("d float", "d")]:
        with pytest.raises(Exception, match=rf"column '{col}' holds .* without losing"):
            _reader(spark, endpoint, seg).schema(ddl).load().collect()
    # Exact widenings and label-only differences are still read
    back = _reader(spark, endpoint, seg).schema("id bigint, i bigint, d double").load()
    assert sorted((r.id, r.i, r.d) for r in back.collect()) == [(k, k, k / 3) for k in range(20)]


# --- defect 2: timeouts -----------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_refused_connection_fails_in_seconds_on_write_and_read(spark: Any) -> None:
    ep = f"tcp://127.0.0.1:{_free_port()}"
    df = spark.range(3)
    for run in (
        lambda: _writer(df, ep, "x/0", connectTimeout="2").mode("append").save(),
        lambda: _reader(spark, ep, "x/0", connectTimeout="2").load().collect(),
    ):
        started = time.monotonic()
        with pytest.raises(
            Exception, match=r"could not connect to tcp://127\.0\.0\.1:\d+ within 2s"
        ):
            run()
        assert time.monotonic() - started < 20  # main: 65 s (the 60 s reconnect default)


def test_timeout_bounds_a_call_to_a_silent_server(endpoint: str) -> None:
    """A peer that accepts connections and never answers: every call gives up within
    about ``timeout`` (+ ``connectTimeout``), on the driver and in the tasks alike."""
    from segmentstore_client.spark.connect import open_client, probe
    from segmentstore_client.spark.options import Timeouts

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        ep = f"tcp://127.0.0.1:{silent.getsockname()[1]}"
        probe(ep, 1.0)  # TCP opens: the peer is there ...
        started = time.monotonic()
        with pytest.raises(ConnectFailed):  # ... but never says Hello
            open_client(ep, Timeouts(call=2.0, connect=1.0)).segment_info("x/0")
        assert time.monotonic() - started < 10


# --- defect 3: no leaked transaction segment, no stale report -------------------------


def _job(endpoint: str, seg: str, **opts: str) -> WriteJob:
    options = WriteOptions.parse(
        {"endpoint": endpoint, "segment": seg, "rowsPerEvent": "100", **opts}
    )
    with sync.connect(endpoint) as c:  # what the driver does before any task starts
        c.create_segment(seg, exist_ok=True)
    return WriteJob(options, uuid.uuid4(), "{}")


def _groups(job: WriteJob, rows: int, pause: threading.Event | None = None) -> Iterator[Group]:
    batch = pa.record_batch({"id": pa.array(range(rows), pa.int64())})
    for k, g in enumerate(arrow_groups(iter([batch]), job.options, "{}")):
        if pause is not None and k == 2:
            pause.wait(30)  # the driver aborts the run here
        yield g


def test_atomic_abort_leaves_no_transaction_segment_even_with_late_attempts(
    endpoint: str, seg: str
) -> None:
    job = _job(endpoint, seg, atomic="true")
    # An attempt that is mid-write when the driver aborts ...
    aborted = threading.Event()
    errors: list[BaseException] = []

    def slow() -> None:
        try:
            write_partition(job, 0, 0, lambda: _groups(job, 1000, aborted))
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=slow)
    t.start()
    with sync.connect(endpoint) as c:
        for _ in range(300):  # wait until its transaction segment exists (<= 15 s)
            try:
                c.segment_info(job.destination(0))
                break
            except NoSuchSegment:
                time.sleep(0.05)
    report = abort_write(job, [None, None])
    aborted.set()
    t.join(30)
    assert errors, "the attempt must fail once its run is aborted"
    # ... and one that only starts after the abort (a straggler creating its segment).
    with pytest.raises(WriteFenced):
        write_partition(job, 1, 0, lambda: _groups(job, 500))
    assert report.deleted == [job.destination(0)]
    with sync.connect(endpoint) as c:
        for p in range(2):
            with pytest.raises(NoSuchSegment):
                c.segment_info(job.destination(p))
        assert c.segment_info(seg).length == 0


class _AbortBeforeCreate:
    """A client whose create_segment first lets the driver abort the run: the interleaving
    'attempt checks the fence, driver fences and deletes, attempt creates'."""

    def __init__(self, inner: Any, job: WriteJob) -> None:
        self.inner, self.job = inner, job

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def create_segment(self, segment: str, **kwargs: Any) -> bool:
        abort_write(self.job, [None])
        return bool(self.inner.create_segment(segment, **kwargs))


def test_atomic_attempt_creating_after_the_abort_removes_its_segment(
    endpoint: str, seg: str
) -> None:
    from segmentstore_client.spark.connect import open_client

    job = _job(endpoint, seg, atomic="true")
    with pytest.raises(WriteFenced):
        write_partition(
            job,
            0,
            0,
            lambda: _groups(job, 300),
            client_factory=lambda ep, t: _AbortBeforeCreate(open_client(ep, t), job),
        )
    with sync.connect(endpoint) as c, pytest.raises(NoSuchSegment):
        c.segment_info(job.destination(0))


def test_non_atomic_attempt_stops_writing_once_its_run_is_aborted(endpoint: str, seg: str) -> None:
    job = _job(endpoint, seg, compression="none")
    paused = threading.Event()
    errors: list[BaseException] = []

    def slow() -> None:
        try:
            write_partition(job, 0, 0, lambda: _groups(job, 1000, paused))
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=slow)
    t.start()
    wid = writer_id(job.identity, seg, 0)
    with sync.connect(endpoint) as c:
        for _ in range(300):  # until the first two groups are durable (<= 15 s)
            if (c.last_event_number(seg, wid) or 0) >= event_number(1):
                break
            time.sleep(0.05)
    report = abort_write(job, [None])
    paused.set()
    t.join(30)
    assert errors and isinstance(errors[0], WriteFenced)
    with sync.connect(endpoint) as c:
        assert c.last_event_number(seg, wid) == event_number(1)  # groups 2..9 never written
    assert f"events up to number {event_number(1)} " in str(report)


def test_non_atomic_abort_report_is_not_made_stale_by_a_late_attempt(
    endpoint: str, seg: str
) -> None:
    job = _job(endpoint, seg, compression="none")
    write_partition(job, 0, 0, lambda: _groups(job, 300))  # 3 events durable
    report = abort_write(job, [None])
    text = str(report)
    assert "events up to number" in text
    length = _length(endpoint, seg)
    # A straggling attempt of the aborted run writes nothing after the report.
    with pytest.raises(WriteFenced):
        write_partition(job, 0, 1, lambda: _groups(job, 1000))
    assert _length(endpoint, seg) == length
    with sync.connect(endpoint) as c:
        last = c.last_event_number(seg, writer_id(job.identity, seg, 0))
    assert f"events up to number {last} " in text


# --- defect 4: write ids with versions -------------------------------------------------


def test_write_versions_skip_repeats_and_write_new_versions(
    spark: Any, endpoint: str, seg: str
) -> None:
    app = f"app-{seg}"

    def write(lo: int, hi: int, version: str | None, **opts: str) -> None:
        df = spark.range(lo, hi, 1, 2)
        extra = {"writeVersion": version} if version is not None else {}
        _writer(df, endpoint, seg, writeId=app, **extra, **opts).mode("append").save()

    def ids() -> list[int]:
        return sorted(r.id for r in _reader(spark, endpoint, seg).load().collect())

    write(0, 100, "1")
    write(0, 100, "1")  # the same version again: skipped
    assert ids() == list(range(100))
    write(100, 150, "2")  # a new version: written
    assert ids() == list(range(150))
    length = _length(endpoint, seg)
    write(500, 600, "1")  # an older version: skipped, like Delta's txnVersion
    with pytest.raises(Exception, match=r"version 2 was already committed with 50 row\(s\)"):
        write(900, 1000, "2")  # the same version with other data: refused, not dropped
    assert _length(endpoint, seg) == length
    # Without a version, a reused writeId with different data fails loudly too.
    with pytest.raises(Exception, match=r"writeId .* already committed with 20 row\(s\)"):
        df = spark.range(0, 20, 1, 2)
        _writer(df, endpoint, seg + "b", writeId=app).mode("append").save()
        _writer(spark.range(0, 30, 1, 2), endpoint, seg + "b", writeId=app).mode("append").save()


# --- defect 5: any thread, no register() -------------------------------------------------


def test_write_and_read_from_another_thread_without_register(
    spark: Any, endpoint: str, seg: str
) -> None:
    """The conftest never calls register(): Spark found the source by itself. A thread
    that did not build the session writes once it made the session its active one."""
    from segmentstore_client.spark import activate

    out: list[Any] = []

    def work() -> None:
        try:
            activate(spark)
            _writer(spark.range(0, 1000, 1, 2), endpoint, seg).mode("append").save()
            out.append(_reader(spark, endpoint, seg).load().count())
        except BaseException as e:
            out.append(e)

    t = threading.Thread(target=work)
    t.start()
    t.join(120)
    assert out == [1000]


# --- save modes ------------------------------------------------------------------------


def test_overwrite_replaces_the_contents_atomically(spark: Any, endpoint: str, seg: str) -> None:
    _writer(spark.range(0, 5000, 1, 2), endpoint, seg).mode("append").save()
    before = _length(endpoint, seg)
    _writer(spark.range(7000, 7300, 1, 3), endpoint, seg).mode("overwrite").save()
    back = sorted(r.id for r in _reader(spark, endpoint, seg).load().collect())
    assert back == list(range(7000, 7300))
    with sync.connect(endpoint) as c:
        info = c.segment_info(seg)
    assert info.start_offset == before  # the old contents were truncated away
    # An aborted overwrite changes nothing
    with pytest.raises(Exception, match="injected failure"):
        (
            spark.range(0, 40_000, 1, 2)
            .write.format("segmentstore_faulty")
            .option("endpoint", endpoint)
            .option("segment", seg)
            .option("fail_partition", "1")
            .option("fail_after_rows", "10000")
            .option("fail_attempts", "all")
            .mode("overwrite")
            .save()
        )
    assert sorted(r.id for r in _reader(spark, endpoint, seg).load().collect()) == back
    # Overwriting with no rows, even with no partitions at all, empties the target
    empty = spark.createDataFrame([], "id bigint")
    _writer(empty, endpoint, seg).mode("overwrite").save()
    assert _reader(spark, endpoint, seg).schema("id bigint").load().count() == 0


def test_errorifexists_and_ignore_as_the_save_mode_option(
    spark: Any, endpoint: str, seg: str
) -> None:
    """Spark 4 refuses both modes before the source runs; the saveMode option has them."""
    for mode in ("errorifexists", "ignore"):
        with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
            _writer(spark.range(1), endpoint, "x/0").mode(mode).save()
    df = spark.range(0, 100, 1, 2)
    _writer(df, endpoint, seg, saveMode="errorifexists").mode("append").save()  # new: ok
    length = _length(endpoint, seg)
    with pytest.raises(Exception, match=r"already holds data \(saveMode errorifexists\)"):
        _writer(df, endpoint, seg, saveMode="errorifexists").mode("append").save()
    _writer(spark.range(500, 600), endpoint, seg, saveMode="ignore").mode("append").save()
    assert _length(endpoint, seg) == length  # ignored: nothing written
    _writer(df, endpoint, seg + "b", saveMode="ignore").mode("append").save()  # empty: written
    assert _reader(spark, endpoint, seg + "b").load().count() == 100


# --- reads: partitions, pruning --------------------------------------------------------


def test_a_single_segment_is_read_by_every_core(spark: Any, endpoint: str, seg: str) -> None:
    df = spark.range(0, 300_000, 1, 1).selectExpr("id", "repeat('x', 20) as s")
    _writer(df, endpoint, seg, compression="none").mode("append").save()
    assert _length(endpoint, seg) > 2 << 20
    back = _reader(spark, endpoint, seg, minPartitions="2").load()
    assert back.rdd.getNumPartitions() >= 2
    assert back.count() == 300_000
    one = _reader(spark, endpoint, seg, columns="s").load()
    assert one.columns == ["s"] and one.where("s = repeat('x', 20)").count() == 300_000
    with pytest.raises(Exception, match=r"option 'columns': 'nope' not in the data"):
        _reader(spark, endpoint, seg, columns="nope").load()
    # nothing to read: Spark's placeholder partition reads as no rows
    with sync.connect(endpoint) as c:
        c.create_segment(seg + "-empty")
    assert _reader(spark, endpoint, seg + "-empty").schema("id bigint").load().count() == 0


def test_filter_pushdown_skips_ranges_outside_offset_bounds(
    spark: Any, endpoint: str, seg: str
) -> None:
    df = spark.range(0, 200_000, 1, 1).selectExpr("id", "repeat('y', 30) as s")
    _writer(df, endpoint, seg, compression="none", rowsPerEvent="10000").mode("append").save()
    raw = _reader(spark, endpoint, seg, output="raw").load().orderBy("offset").collect()
    cut = raw[15].offset  # events 15..19 hold ids 150000..199999
    opts = {"offsetColumns": "true", "partitionBytes": "1048576", "minPartitions": "1"}
    whole = _reader(spark, endpoint, seg, **opts).load()
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        pushed = (
            _reader(spark, endpoint, seg, filterPushdown="true", **opts)
            .load()
            .where(f"_offset >= {cut}")
        )
        ids = sorted(r.id for r in pushed.select("id").collect())
        assert ids == list(range(150_000, 200_000))
        # fewer input partitions: the ranges before the bound were not planned
        assert pushed.rdd.getNumPartitions() < whole.rdd.getNumPartitions()
        one = _reader(spark, endpoint, seg, filterPushdown="true", **opts).load()
        assert one.where(f"_segment = 'other' and _offset < {cut}").count() == 0
    finally:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")


# --- errors ------------------------------------------------------------------------------


def test_raw_events_are_reported_as_raw_events(spark: Any, endpoint: str, seg: str) -> None:
    with sync.connect(endpoint) as c:
        c.create_segment(seg)
        with c.writer(seg) as w:
            w.write_many([b"plain bytes %d" % i for i in range(5)])
    with pytest.raises(Exception) as info:
        _reader(spark, endpoint, seg).schema("a string").load().collect()
    text = str(info.value)
    assert f"segment {seg!r} holds raw events" in text and "option('output', 'raw')" in text
    assert "CRC" not in text and "crc" not in text
    assert _reader(spark, endpoint, seg, output="raw").load().count() == 5


def test_errors_are_one_clear_line(spark: Any) -> None:
    with pytest.raises(Exception) as info:
        spark.read.format("segmentstore").option("segment", "x/0").load()
    lines = [x for x in str(info.value).splitlines() if "'endpoint'" in x]
    assert lines and re.search(r"option 'endpoint' \(tcp://host:port\) is required", lines[0])
