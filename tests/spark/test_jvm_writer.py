"""The ``segmentstore-jvm`` writer (Java, DataSource V2) on a real local Spark.

Rows written through the JVM sink are read back by both readers (the Python source
``segmentstore`` and the JVM reader); identities, event numbers and pieces are the
Python sink's. The jar is built by ``segmentstore_client.spark.jvm.jar_path()`` and put
on ``spark.jars`` by ``tests/spark/conftest.py``; without a JDK these tests are skipped.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import socket
import time
import uuid
from collections.abc import Callable
from decimal import Decimal
from functools import partial
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
        "arr ARRAY<STRUCT<x: DECIMAL(38,18), `when`: TIMESTAMP>>, m MAP<STRING, DECIMAL(10,2)>, "
        "d18 DECIMAL(18,2), d3 DECIMAL(3,3)"
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
            # top-level DECIMAL(p <= 18) goes through Decimal64Writer: both extremes
            d18=None
            if i == 5
            else Decimal("-9999999999999999.99" if i % 2 else "9999999999999999.99")
            + i * (1 if i % 2 else -1),
            d3=Decimal("-0.999") if i == 0 else Decimal(i) / 1000,
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
    # ... with the Arrow types the Python sink writes (string, not large_string, ...).
    df.write.format("segmentstore").option("endpoint", endpoint).option("segment", seg + "p").mode(
        "append"
    ).save()
    python_schema = decode_arrow(_events(endpoint, seg + "p")[0].value)[0]
    assert [str(f.type) for f in schema] == [str(f.type) for f in python_schema]


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


def test_groups_over_max_event_bytes_are_split_in_pieces(
    spark: Any, endpoint: str, seg: str
) -> None:
    # 64 rows of 640 hex digits in groups of 16: each group (~10 KB) is split into halves
    # until a piece fits in 2,048 bytes, the way the Python sink splits.
    df = spark.range(0, 64, 1, 1).selectExpr(
        "id",
        "concat_ws('', transform(sequence(1, 5), x -> sha2(cast(id * 10 + x as string), 512)))"
        " as s",
    )
    opts = {"rowsPerEvent": "16", "maxEventBytes": "2048", "compression": "none"}
    _save(df, endpoint, seg, **opts)
    events = _events(endpoint, seg)
    rows = [int(e.headers["spark.rows"]) for e in events]
    assert sum(rows) == 64 and len(events) > 4
    assert all(len(records.encode(e.value, headers=e.headers)) <= 2048 for e in events)
    # Each group of 16 is cut the same way: halves of halves, pieces of 2 rows here, as
    # the Python sink cuts the same rows.
    assert rows == [2] * 32, rows
    w = df.write.format("segmentstore").option("endpoint", endpoint).option("segment", seg + "p")
    for k, v in opts.items():
        w = w.option(k, v)
    w.mode("append").save()
    assert [int(e.headers["spark.rows"]) for e in _events(endpoint, seg + "p")] == rows
    ids = [i for e in events for b in decode_arrow(e.value)[1] for i in b.column(0).to_pylist()]
    assert ids == list(range(64))
    (msg,) = _report(spark)
    assert msg["events"] == 32 and msg["last_event_number"] == event_number(3, 7)
    with sync.connect(endpoint) as c:
        assert c.last_event_number(seg, msg["writer_id"]) == event_number(3, 7)
    assert sorted(_jvm(spark, endpoint, seg).load().collect()) == sorted(df.collect())


def test_a_retried_task_resumes_without_duplicates(spark: Any, endpoint: str, seg: str) -> None:
    from pyspark import TaskContext
    from pyspark.sql.functions import col, udf

    @udf("bigint")  # type: ignore[misc]
    def fail_once(i: int) -> int:
        ctx = TaskContext.get()
        first = ctx is not None and ctx.partitionId() == 0 and ctx.attemptNumber() == 0
        if first and i == 50_000:  # rows 0..49,999 (five groups) have reached the writer
            raise RuntimeError("injected failure")
        return i

    n = 200_000
    df = _df(spark, n).withColumn("id", fail_once(col("id")))
    _save(df, endpoint, seg, rowsPerEvent="10000")
    back = _python(spark, endpoint, seg).load()
    assert _fingerprint(back) == _fingerprint(_df(spark, n))
    p0, p1 = _report(spark)
    # The retry wrote as the same writer: the server held the first attempt's durable
    # groups, which the retry did not even encode, and it wrote only the rest.
    assert p0["attempt"] == 1 and p0["resumed_from"] >= event_number(0)
    # Groups held before the last one held are skipped unencoded; the last one held is
    # encoded (it might have had more pieces) and its held piece not sent again.
    last_held = (p0["resumed_from"] - 1) >> 21
    assert p0["groups_skipped"] == last_held and p0["events"] == 10 - (last_held + 1)
    assert p0["rows"] == 100_000 and p0["last_event_number"] == event_number(9)
    assert p1["attempt"] == 0 and p1["resumed_from"] == 0 and p1["events"] == 10
    assert len(_events(endpoint, seg)) == 20  # no event twice


def test_save_modes(spark: Any, endpoint: str, seg: str) -> None:
    df = _df(spark, 1_000)
    _save(df, endpoint, seg, saveMode="errorifexists")  # a new target: written
    msg = _error(lambda: _save(df, endpoint, seg, saveMode="errorifexists"))
    assert f"target '{seg}' already holds data (saveMode errorifexists)" in msg, msg
    _save(df, endpoint, seg, saveMode="ignore")  # holds data: nothing written
    assert _jvm(spark, endpoint, seg).load().count() == 1_000
    _save(df, endpoint, seg)  # append
    assert _python(spark, endpoint, seg).load().count() == 2_000
    msg = _error(lambda: _save(df, endpoint, seg, mode="overwrite"))
    assert "segmentstore-jvm does not support .mode('overwrite')" in msg, msg
    assert "format('segmentstore')" in msg
    # Spark's own default (errorifexists) is refused by Spark for any V2 source that
    # writes, as for the Python sink: the option saveMode says it instead.
    msg = _error(lambda: _save(df, endpoint, seg, mode="errorifexists"))
    assert "ErrorIfExists" in msg or "errorifexists" in msg.lower(), msg


@pytest.mark.parametrize(
    ("option", "value", "what"),
    [
        ("atomic", "true", "atomic writes"),
        ("stream", "s/t", "stream writes"),
        ("credentials", "ann:pw", "authentication"),
        ("tlsCaFile", "/x.pem", "TLS"),
        ("encoding", "msgpack", "encoding=msgpack"),
        ("recordFormat", "json", "record formats"),
    ],
)
def test_what_only_the_python_sink_writes_is_refused(
    spark: Any, endpoint: str, seg: str, option: str, value: str, what: str
) -> None:
    msg = _error(lambda: _save(_df(spark, 10), endpoint, seg, **{option: value}))
    assert f"segmentstore-jvm does not support {what}" in msg, msg
    assert "write with format('segmentstore') (the Python sink) instead" in msg
    with sync.connect(endpoint) as c:  # refused on the driver, before any target is made
        assert seg not in c.list_segments(seg.rsplit("/", 1)[0])


def test_unknown_and_bad_options_fail_on_the_driver(spark: Any, endpoint: str, seg: str) -> None:
    msg = _error(lambda: _save(_df(spark, 10), endpoint, seg, rowsPerEvnt="5"))
    assert "option 'rowsPerEvnt' is unknown for a write; known options: " in msg, msg
    assert "maxEventBytes" in msg and "saveMode" in msg
    msg = _error(lambda: _save(_df(spark, 10), endpoint, seg, partitionBytes="5"))
    assert "option 'partitionBytes' is unknown for a write" in msg, msg
    msg = _error(lambda: _save(_df(spark, 10), endpoint, seg, maxEventBytes="10"))
    assert "option 'maxEventBytes' must be in 1024..8323072, not 10" in msg, msg
    msg = _error(lambda: _save(_df(spark, 10), endpoint, seg, compression="gzip"))
    assert "option 'compression' must be one of none, lz4, zstd, not 'gzip'" in msg, msg


def test_a_missing_segment_without_create(spark: Any, endpoint: str, seg: str) -> None:
    msg = _error(lambda: _save(_df(spark, 10), endpoint, seg, create="false"))
    assert f"segment '{seg}': the segment does not exist (NoSuchSegment)" in msg, msg


def test_a_refused_connection_fails_in_seconds(spark: Any) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    msg = _error(lambda: _save(_df(spark, 10), f"tcp://127.0.0.1:{port}", "x/y/0", timeout="2"))
    assert f"segmentstore-jvm: cannot connect to 127.0.0.1:{port}" in msg, msg
    assert time.monotonic() - t0 < 15
    with socket.socket() as silent:  # accepts (the kernel's backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        ep = f"tcp://127.0.0.1:{silent.getsockname()[1]}"
        t0 = time.monotonic()
        msg = _error(lambda: _save(_df(spark, 10), ep, "x/y/0", timeout="1"))
        assert "no reply from 127.0.0.1" in msg and "within 1000 ms" in msg, msg
        assert time.monotonic() - t0 < 15


def test_one_row_over_the_event_limit_is_one_clear_error(
    spark: Any, endpoint: str, seg: str
) -> None:
    df = spark.range(0, 1, 1, 1).selectExpr("id", "repeat('x', 9000000) as s")
    msg = _error(lambda: _save(df, endpoint, seg, compression="none"))
    assert "one row encodes to 9" in msg and "above the 8323072-byte event limit" in msg, msg


class _CuttingProxy:
    """A TCP proxy to the server that closes a connection once its client has sent more
    than ``limit`` bytes (a server that goes away in the middle of a write), or with
    ``stall`` stops reading from the client there and keeps the connection open (a server
    that takes no more data)."""

    def __init__(self, endpoint: str, limit: int, stall: bool = False) -> None:
        import threading

        host, port = endpoint.removeprefix("tcp://").rsplit(":", 1)
        self._target = (host, int(port))
        self._limit = limit
        self._stall = stall
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.endpoint = f"tcp://127.0.0.1:{self._listener.getsockname()[1]}"
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        import threading

        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            server = socket.create_connection(self._target, timeout=10)
            for src, dst, limit in ((client, server, self._limit), (server, client, None)):
                t = threading.Thread(target=self._pump, args=(src, dst, limit), daemon=True)
                t.start()
                self._threads.append(t)

    def _pump(self, src: socket.socket, dst: socket.socket, limit: int | None) -> None:
        sent = 0
        src.settimeout(0.5)
        try:
            while not self._stop.is_set():
                try:
                    data = src.recv(65536)
                except TimeoutError:
                    continue
                if not data:
                    break
                sent += len(data)
                if limit is not None and sent > limit:
                    if self._stall:  # read nothing more; the client's writes back up
                        self._stop.wait(60)
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.close()

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(5)
        self._listener.close()


def test_a_server_that_closes_mid_write_fails_the_job_in_one_line(
    spark: Any, endpoint: str, seg: str
) -> None:
    proxy = _CuttingProxy(endpoint, limit=256 * 1024)
    try:
        t0 = time.monotonic()
        df = _df(spark, 100_000, partitions=1)
        msg = _error(lambda: _save(df, proxy.endpoint, seg, rowsPerEvent="2000", timeout="5"))
        assert time.monotonic() - t0 < 60
    finally:
        proxy.close()
    first = next(line for line in msg.splitlines() if "segmentstore-jvm" in line)
    assert "closed the connection" in first or "cannot send to" in first, msg
    assert f"segment '{seg}'" in first, first


def test_a_server_that_stops_reading_fails_the_write_within_the_timeout(
    spark: Any, endpoint: str, seg: str
) -> None:
    """A server that answers the set-up, then takes no more bytes: the task's blocked
    socket write is cut by the write watchdog after ``timeout``, one line, no hang."""
    proxy = _CuttingProxy(endpoint, limit=256 * 1024, stall=True)
    try:
        t0 = time.monotonic()
        df = spark.range(0, 3000, 1, 1).selectExpr("id", "repeat(cast(id as string), 4000) s")
        msg = _error(
            lambda: _save(
                df, proxy.endpoint, seg, rowsPerEvent="50", compression="none", timeout="1"
            )
        )
        assert time.monotonic() - t0 < 60
    finally:
        proxy.close()
    first = next(line for line in msg.splitlines() if "segmentstore-jvm" in line)
    assert "cannot send to" in first and "took no data for 1000 ms" in first, msg
    assert f"segment '{seg}'" in first, first


def test_a_python_attempt_of_a_jvm_write_writes_nothing_again(
    spark: Any, endpoint: str, seg: str
) -> None:
    """The two sinks derive the same writer and the same event numbers from one identity:
    a Python sink attempt of a partition the JVM sink wrote finds every event held."""
    from segmentstore_client.spark.codec import schema_json_of
    from segmentstore_client.spark.options import WriteOptions
    from segmentstore_client.spark.writer import WriteJob, arrow_groups, write_partition

    df = _df(spark, 25_000, partitions=1)
    _save(df, endpoint, seg, rowsPerEvent="10000")
    (jvm,) = _report(spark)
    assert jvm["events"] == 3 and jvm["last_event_number"] == event_number(2)
    opts = WriteOptions.parse({"endpoint": endpoint, "segment": seg, "rowsPerEvent": "10000"})
    job = WriteJob(opts, uuid.UUID(jvm["identity"]), schema_json_of(df.schema))
    table = df.toArrow()
    msg = write_partition(
        job, 0, 1, lambda: arrow_groups(table.to_batches(3_000), opts, job.schema_json)
    )
    assert msg.writer_id == jvm["writer_id"] and msg.resumed_from == event_number(2)
    assert msg.events == 0 and msg.rows == 25_000
    assert len(_events(endpoint, seg)) == 3


def test_partitions_go_to_segments_round_robin(spark: Any, endpoint: str, seg: str) -> None:
    segs = [seg + "a", seg + "b"]
    df = _df(spark, 9_000, partitions=3)
    w = df.write.format(FORMAT).option("endpoint", endpoint).option("segments", ",".join(segs))
    w.option("rowsPerEvent", "1000").mode("append").save()
    # partition p -> segments[p % 2]: partitions 0 and 2 in a, 1 in b
    assert [len(_events(endpoint, s)) for s in segs] == [6, 3]
    assert [m["target"] for m in _report(spark)] == [segs[0], segs[1], segs[0]]
    both = spark.read.format(FORMAT).option("endpoint", endpoint).option("segments", ",".join(segs))
    assert _fingerprint(both.load()) == _fingerprint(df)


# -- a hostile server (test_jvm_hostile.Hostile) answering the write's commands ------------


Answer = Callable[[Any], list[Any]]


def _write_lie(append: Answer, setup: Answer | None = None) -> Callable[[Any], list[Any] | None]:
    """Answers CreateSegment honestly, SetupAppend with ``setup(req)`` (default: a new
    writer) and every AppendBlockEnd with ``append(req)``; the rest as Hostile does."""
    from segmentstore_client.protocol import codec
    from segmentstore_client.protocol.commands import (
        AppendBlockEnd,
        AppendSetup,
        CreateSegment,
        SegmentCreated,
        SetupAppend,
    )

    def lie(req: Any) -> list[Any] | None:
        if isinstance(req, CreateSegment):
            return [codec.encode(SegmentCreated(req.request_id, req.segment))]
        if isinstance(req, SetupAppend):
            if setup is not None:
                return setup(req)
            reply = AppendSetup(req.request_id, req.segment, req.writer_id, -(2**63))
            return [codec.encode(reply)]
        if isinstance(req, AppendBlockEnd):
            return append(req)
        return None

    return lie


def _fails_to_write(spark: Any, lie: Any) -> str:
    from .test_jvm_hostile import Hostile

    with Hostile(b"", lie) as h:
        t0 = time.monotonic()
        msg = _error(lambda: _save(_df(spark, 2_000, 1), h.endpoint, "w/x/0", timeout="1"))
        assert time.monotonic() - t0 < 30, msg
    assert spark.range(3).count() == 3  # the JVM is alive
    return next((ln for ln in msg.splitlines() if "segmentstore-jvm" in ln), msg)


def test_a_hostile_server_fails_a_write_in_one_line(spark: Any) -> None:
    from segmentstore_client.protocol import codec
    from segmentstore_client.protocol.commands import DataAppended, InvalidEventNumber, WrongHost

    from .test_jvm_hostile import Hostile

    def ack(req: Any, number: int | None = None) -> list[Any]:
        n = req.last_event_number if number is None else number
        return [codec.encode(DataAppended(req.writer_id, n, -1, req.request_id, 0))]

    with Hostile(b"", _write_lie(ack)) as h:  # the control: honest answers, a write
        _save(_df(spark, 2_000, 1), h.endpoint, "w/x/0", rowsPerEvent="500")
        assert [m["events"] for m in _report(spark)] == [4]
    wrong_host = _write_lie(ack, lambda req: [codec.encode(WrongHost(req.request_id, "w/x/0"))])
    assert "does not own this segment (WrongHost)" in _fails_to_write(spark, wrong_host)
    msg = _fails_to_write(spark, _write_lie(lambda req: ack(req, req.last_event_number + 2)))
    assert "acknowledged event number 3 for event 1" in msg, msg
    bad_number = _write_lie(
        lambda req: [codec.encode(InvalidEventNumber(req.writer_id, req.request_id, "", 1))]
    )
    assert "refused an event number (InvalidEventNumber)" in _fails_to_write(spark, bad_number)
    msg = _fails_to_write(spark, _write_lie(lambda req: [5.0]))  # never acknowledges
    assert "no reply from 127.0.0.1" in msg and "within 1000 ms" in msg, msg


def _py_save(df: Any, endpoint: str, seg: str, **opts: str) -> None:
    w = df.write.format("segmentstore").option("endpoint", endpoint).option("segment", seg)
    for k, v in opts.items():
        w = w.option(k, v)
    w.mode("append").save()


def test_a_write_id_is_one_write_across_both_formats(spark: Any, endpoint: str, seg: str) -> None:
    df = _df(spark, 5_000)
    # Python first, then the JVM with the same writeId: every partition skipped.
    _py_save(df, endpoint, seg, writeId="nightly-1", rowsPerEvent="1000")
    events = len(_events(endpoint, seg))
    _save(df, endpoint, seg, writeId="nightly-1", rowsPerEvent="1000")
    assert all(m["skipped"] and m["events"] == 0 for m in _report(spark))
    assert len(_events(endpoint, seg)) == events
    # The JVM first, then Python: nothing written again either.
    _save(df, endpoint, seg + "j", writeId="nightly-2", rowsPerEvent="1000")
    events = len(_events(endpoint, seg + "j"))
    _py_save(df, endpoint, seg + "j", writeId="nightly-2", rowsPerEvent="1000")
    assert len(_events(endpoint, seg + "j")) == events
    assert _fingerprint(_jvm(spark, endpoint, seg + "j").load()) == _fingerprint(df)
    # The fingerprint the other format stored is the same (rows, and the schema's hash of
    # its JSON, which the JVM canonicalizes as Python's json.dumps writes it).
    wider = df.selectExpr("*", "1 as extra")
    fewer = _df(spark, 4_000)
    for save in (_save, _py_save):
        msg = _error(partial(save, fewer, endpoint, seg, writeId="nightly-1"))
        assert "'nightly-1' was already committed with 5000 row(s); this write has 4000" in msg
        msg = _error(partial(save, wider, endpoint, seg + "j", writeId="nightly-2"))
        assert "'nightly-2' was already committed with another schema" in msg, msg
    assert len(_events(endpoint, seg + "j")) == events
    # writeVersion: a version at or below the committed one is skipped, a higher written.
    _save(df, endpoint, seg + "v", writeId="app", writeVersion="1")
    _py_save(df, endpoint, seg + "v", writeId="app", writeVersion="1")
    _save(df, endpoint, seg + "v", txnAppId="app", txnVersion="1")
    assert _jvm(spark, endpoint, seg + "v").load().count() == 5_000
    _save(df, endpoint, seg + "v", writeId="app", writeVersion="2")
    assert _python(spark, endpoint, seg + "v").load().count() == 10_000
    msg = _error(lambda: _save(df, endpoint, seg, writeVersion="2"))
    assert "option 'writeVersion' needs 'writeId'" in msg, msg


def test_a_streaming_write_is_refused_by_spark(
    spark: Any, endpoint: str, seg: str, tmp_path: Any
) -> None:
    stream = spark.readStream.format("rate").option("rowsPerSecond", "10").load()
    w = stream.writeStream.format(FORMAT).option("endpoint", endpoint).option("segment", seg)
    w = w.option("checkpointLocation", str(tmp_path / "cp"))
    msg = _error(lambda: w.start().awaitTermination(10))
    # Spark's own line (no STREAMING_WRITE capability): the Python sink streams.
    assert "Data source segmentstore-jvm does not support streamed writing" in msg, msg


def test_a_failed_run_with_a_write_id_is_finished_by_the_next(
    spark: Any, endpoint: str, seg: str
) -> None:
    from pyspark import TaskContext
    from pyspark.sql.functions import col, udf

    @udf("bigint")  # type: ignore[misc]
    def fail_partition_1(i: int) -> int:
        ctx = TaskContext.get()
        if ctx is not None and ctx.partitionId() == 1 and i == 75_000:  # every attempt
            raise RuntimeError("injected failure")
        return i

    n = 100_000
    failing = _df(spark, n).withColumn("id", fail_partition_1(col("id")))
    msg = _error(lambda: _save(failing, endpoint, seg, writeId="finish-me", rowsPerEvent="5000"))
    assert "injected failure" in msg
    stored = _python(spark, endpoint, seg).load().count()
    assert 50_000 <= stored < n  # partition 0 complete, partition 1 in part
    _save(_df(spark, n), endpoint, seg, writeId="finish-me", rowsPerEvent="5000")
    p0, p1 = _report(spark)
    assert p0["resumed_from"] == event_number(9) and p0["events"] == 0  # all held
    assert p1["resumed_from"] > 0 and p1["events"] < 10
    assert _fingerprint(_jvm(spark, endpoint, seg).load()) == _fingerprint(_df(spark, n))


def test_an_attempt_of_an_aborted_run_stops(spark: Any) -> None:
    """The task side of the fence: an attempt that finds its run's fence attribute set
    (here: a server that says every attribute but the overwrite base is set) stops."""
    from segmentstore_client.protocol import codec
    from segmentstore_client.protocol.commands import (
        DataAppended,
        GetSegmentAttribute,
        SegmentAttribute,
    )
    from segmentstore_client.spark.options import BASE_ATTRIBUTE

    def ack(req: Any) -> list[Any]:
        return [
            codec.encode(DataAppended(req.writer_id, req.last_event_number, -1, req.request_id, 0))
        ]

    appends = _write_lie(ack)

    def lie(req: Any) -> list[Any] | None:
        if isinstance(req, GetSegmentAttribute) and req.attribute_id != BASE_ATTRIBUTE:
            return [codec.encode(SegmentAttribute(req.request_id, 1))]
        return appends(req)

    msg = _fails_to_write(spark, lie)
    assert "partition 0: the driver aborted write" in msg and "this attempt stops" in msg, msg


def test_an_aborted_run_sets_its_fence(spark: Any, endpoint: str, seg: str) -> None:
    import re

    from pyspark import TaskContext
    from pyspark.sql.functions import col, udf
    from segmentstore_client.spark.options import fence_attribute

    @udf("bigint")  # type: ignore[misc]
    def fail_partition_1(i: int) -> int:
        ctx = TaskContext.get()
        if ctx is not None and ctx.partitionId() == 1 and i == 15_000:  # every attempt
            raise RuntimeError("injected failure")
        return i

    failing = _df(spark, 20_000).withColumn("id", fail_partition_1(col("id")))
    assert "injected failure" in _error(lambda: _save(failing, endpoint, seg, rowsPerEvent="2500"))
    line = spark._jvm.io.segmentstore.spark.JvmWrite.lastAbort()
    assert "aborted: non-atomic write, the targets keep what was written" in line, line
    assert "1 of 2 partition(s) complete" in line and "the write had no writeId" in line, line
    run = uuid.UUID(re.search(r"\(run ([0-9a-f-]{36})\)", line).group(1))  # type: ignore[union-attr]
    # One line per partition, as the Python sink's abort reports (partition 1 failed at
    # its row 5,000, after its first 5,000-row group... or fewer, if not yet durable).
    assert re.search(rf"partition 0 -> {seg} \(writer [0-9a-f-]+\): complete, 10000 row", line)
    assert re.search(rf"partition 1 -> {seg} \(writer [0-9a-f-]+\): (incomplete|nothing)", line)
    with sync.connect(endpoint) as c:
        assert c.get_attribute(seg, fence_attribute(run)) == 1
