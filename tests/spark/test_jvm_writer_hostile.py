"""Attacks on the ``segmentstore-jvm`` writer (session 13): data, identities, hostile peers."""

from __future__ import annotations

from typing import Any

import pytest
from segmentstore_client import sync
from segmentstore_client.spark.jvm import FORMAT

from .test_jvm_writer import _error, _events, _jvm, _py_save, _python, _report, _save, _types

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("jvm_jar")]


def _both(spark: Any, endpoint: str, seg: str) -> list[Any]:
    return [_python(spark, endpoint, seg).load(), _jvm(spark, endpoint, seg).load()]


def test_split_groups_of_every_type_read_back(spark: Any, endpoint: str, seg: str) -> None:
    # Groups of 77 rows cut into pieces under 1 KiB: slices of nested, nullable and
    # decimal vectors at offsets that are not multiples of 8 (EventEncoder.encode).
    from pyspark.sql.functions import col

    df = _types(spark)
    for k in range(1, 8):
        df = df.union(_types(spark).withColumn("id", col("id") + 10 * k))
    df = df.coalesce(1)
    _save(df, endpoint, seg, rowsPerEvent="77", maxEventBytes="1024", compression="none")
    want = sorted(df.collect(), key=lambda r: r.id)
    for back in _both(spark, endpoint, seg):
        assert back.schema == df.schema
        assert sorted(back.collect(), key=lambda r: r.id) == want


def test_unicode_names_are_one_write_id_across_both_formats(
    spark: Any, endpoint: str, seg: str
) -> None:
    # The schema hash of a writeId's fingerprint covers the names: the JVM escapes them as
    # Python's json.dumps does (\\u00fc, and surrogate pairs for the emoji), or a repeat
    # through the Python sink is refused as "another schema".
    df = spark.range(0, 10, 1, 2).selectExpr(
        "id as `ünï 名前`", "id * 2 as `a.b`", "'x' as `A b`", "id as `😀`"
    )
    _save(df, endpoint, seg, writeId="w-names")
    _py_save(df, endpoint, seg, writeId="w-names")  # the same write: skipped
    for back in _both(spark, endpoint, seg):
        assert back.schema == df.schema
        assert sorted(back.collect()) == sorted(df.collect())


def test_empty_partitions_of_a_repeat_check_the_write_id(
    spark: Any, endpoint: str, seg: str
) -> None:
    # 3 rows in 5 partitions: two are empty and never open an append. A JVM repeat of the
    # writeId with 4 rows must still be found to be a repeat (by every partition) and
    # refused for its other row count.
    _py_save(spark.range(0, 3, 1, 5).selectExpr("id", "'x' as s"), endpoint, seg, writeId="w-e")
    again = spark.range(0, 4, 1, 5).selectExpr("id", "'x' as s")
    msg = _error(lambda: _save(again, endpoint, seg, writeId="w-e"))
    assert "writeId 'w-e' was already committed with 3 row(s); this write has 4" in msg, msg
    for back in _both(spark, endpoint, seg):
        assert back.count() == 3


def test_a_type_no_python_reader_reads_is_refused_on_the_driver(
    spark: Any, endpoint: str, seg: str
) -> None:
    df = spark.range(0, 4, 1, 1).selectExpr(
        "id", "named_struct('y', make_ym_interval(cast(id as int), 2)) as ym"
    )
    msg = _error(lambda: _save(df, endpoint, seg))
    assert "segmentstore-jvm: column 'ym' holds INTERVAL YEAR TO MONTH" in msg, msg
    with sync.connect(endpoint) as c:  # refused before any target is made
        assert seg not in c.list_segments(seg.rsplit("/", 1)[0])


def test_a_sealed_target_says_it_takes_no_more_writes(spark: Any, endpoint: str, seg: str) -> None:
    _save(spark.range(0, 10, 1, 1), endpoint, seg)
    with sync.connect(endpoint) as c:
        c.seal(seg)
    msg = _error(lambda: _save(spark.range(0, 10, 1, 1), endpoint, seg, timeout="5"))
    line = next(ln for ln in msg.splitlines() if "segmentstore-jvm" in ln)
    assert f"segment '{seg}': the segment is sealed and takes no more writes" in line, line
    assert "no data there" not in line  # the read's wording


@pytest.mark.parametrize("fmt", [FORMAT, "segmentstore"])
def test_a_write_id_rerun_with_fewer_rows_is_refused(
    spark: Any, endpoint: str, seg: str, fmt: str
) -> None:
    """Run 1 of writeId W writes partition 0 whole and partition 1 in part, then fails
    (aborted: no commit marker). Run 2 of W with other, shorter data must not commit: the
    server holds events of its writers beyond run 2's rows, so the targets would keep rows
    run 2 never had while its commit reports its own count. Both sinks say so."""
    from pyspark import TaskContext
    from pyspark.sql.functions import col, udf

    @udf("bigint")  # type: ignore[misc]
    def fail_p1(i: int) -> int:
        ctx = TaskContext.get()
        if ctx is not None and ctx.partitionId() == 1 and i % 1000 == 900:
            raise RuntimeError("injected failure")
        return i

    def save(df: Any) -> None:
        w = df.write.format(fmt).option("endpoint", endpoint).option("segment", seg)
        w.option("writeId", "w-fewer").option("rowsPerEvent", "100").mode("append").save()

    _error(lambda: save(spark.range(0, 2000, 1, 2).withColumn("id", fail_p1(col("id")))))
    held = _python(spark, endpoint, seg).load().count()
    assert held >= 1000  # partition 0 whole (and partition 1's first groups)
    msg = _error(lambda: save(spark.range(0, 1000, 1, 2)))
    line = next(ln for ln in msg.splitlines() if "the server holds this writer" in ln)
    assert "beyond this attempt's 5 row group(s) (500 rows)" in line, line
    assert "a writeId reused with other data" in line
    # Not committed; a partition the server held nothing of may have written its rows.
    assert held <= _python(spark, endpoint, seg).load().count() <= held + 500


def test_a_sub_millisecond_connect_timeout_still_bounds_connecting(spark: Any) -> None:
    """connectTimeout=0.0001 rounded to 0 ms, which Java's connect() takes as no limit: a
    server whose accept backlog is full (SYNs dropped) held the write until the kernel
    gave up, minutes later."""
    import socket
    import threading
    import time

    with socket.socket() as full, socket.socket() as queued:
        full.bind(("127.0.0.1", 0))
        full.listen(0)
        queued.connect(full.getsockname())  # fills the backlog: later SYNs are dropped
        port = full.getsockname()[1]
        out: list[str] = []

        def write() -> None:
            df = spark.range(0, 10, 1, 1)
            out.append(
                _error(
                    lambda: _save(df, f"tcp://127.0.0.1:{port}", "a/b/0", connectTimeout="0.0001")
                )
            )

        t0 = time.monotonic()
        t = threading.Thread(target=write, daemon=True)
        t.start()
        t.join(20)
        took = time.monotonic() - t0
        full.close()  # a connect still waiting is refused now: the thread ends
        t.join(20)
    assert took < 20, "the write was still connecting after 20 s"
    assert f"segmentstore-jvm: cannot connect to 127.0.0.1:{port}" in out[0], out


def test_a_million_row_group_is_cut_without_encoding_it_whole(
    spark: Any, endpoint: str, seg: str
) -> None:
    """rowsPerEvent=1048576 (the maximum) over rows of ~110 bytes: each task's group was
    encoded whole (115 MB, in a buffer grown to 256 MB, then copied) before being halved,
    and two tasks took the local JVM (driver and executor, 1 GiB heap) down. The encoding
    now stops at maxEventBytes; the pieces are the same."""
    df = spark.range(0, 2_000_000, 1, 2).selectExpr("id", "repeat('y', 100) as s")
    _save(df, endpoint, seg, rowsPerEvent="1048576", compression="none")
    assert [m["events"] for m in _report(spark)] == [32, 32]  # 1,000,000 rows in 32 pieces
    back = _jvm(spark, endpoint, seg).load().selectExpr("count(*)", "count(distinct id)")
    assert tuple(back.first()) == (2_000_000, 2_000_000)


def test_a_python_and_a_jvm_run_of_one_write_id_at_once_write_it_once(
    spark: Any, endpoint: str, seg: str
) -> None:
    # Two runs of writeId W at the same time, one per format, as speculative attempts of
    # one write would race: same writers, same numbers, so the server keeps each event once.
    import threading

    df = spark.range(0, 60_000, 1, 2).selectExpr("id", "concat('r', cast(id as string)) as s")
    errors: list[str] = []

    def run(save: Any) -> None:
        try:
            save(df, endpoint, seg, writeId="w-race", rowsPerEvent="1000")
        except Exception as e:  # reported below: a clean refusal is allowed, not a dup
            errors.append(
                next(
                    (ln for ln in str(e).splitlines() if "rror:" in ln or "segmentstore" in ln),
                    str(e)[:300],
                )
            )

    # The Python source is looked up on the calling thread: the JVM run goes in a thread.
    jvm = threading.Thread(target=run, args=(_save,), daemon=True)
    jvm.start()
    run(_py_save)
    jvm.join(300)
    assert not jvm.is_alive()
    assert len(errors) <= 1, errors
    back = _jvm(spark, endpoint, seg).load().selectExpr("count(*)", "count(distinct id)")
    assert tuple(back.first()) == (60_000, 60_000), errors
    assert len(_events(endpoint, seg)) == 60


@pytest.mark.parametrize("encoding", ["arrow", "msgpack"])
def test_the_python_sink_refuses_a_year_month_interval_in_one_line(
    spark: Any, endpoint: str, seg: str, encoding: str
) -> None:
    """pyspark has no Arrow type for INTERVAL YEAR TO MONTH: the Python sink's workers
    failed with a bare ``KeyError: 21``. Now the driver refuses it, naming the column,
    before any target is made."""
    df = spark.range(0, 4, 1, 1).selectExpr(
        "id", "array(make_ym_interval(cast(id as int), 2)) as yms"
    )
    msg = _error(lambda: _py_save(df, endpoint, seg, encoding=encoding))
    assert "column 'yms' holds INTERVAL YEAR TO MONTH" in msg, msg
    assert "KeyError" not in msg
    with sync.connect(endpoint) as c:
        assert seg not in c.list_segments(seg.rsplit("/", 1)[0])
