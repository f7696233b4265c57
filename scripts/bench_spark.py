#!/usr/bin/env python3
"""Spark throughput: the ``segmentstore`` format against ``df.write.parquet``, same run.

Writes and reads the same DataFrame (default 1,000,000 rows of six columns: bigint, int,
string, double, timestamp, decimal) with each sink and prints rows/s and MB/s. Reads
materialize every column (``.write.format("noop")``); "one column" reads only ``id``
(Parquet: ``.select("id")``; segmentstore: ``.option("columns", "id")``, since Spark 4
gives Python sources no column-pruning callback). Each figure is the median of
``--runs`` timed runs after one untimed warm-up run (JIT, Python workers).

    .venv/bin/python scripts/bench_spark.py                     # starts its own server
    .venv/bin/python scripts/bench_spark.py --fsync interval --runs 5
    .venv/bin/python scripts/bench_spark.py --endpoint tcp://127.0.0.1:12345

MB/s counts the bytes each sink stores (segment length; Parquet files' size).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from segmentstore.server.launcher import ServerProcess


@contextmanager
def server(data_dir: Path, fsync: str) -> Iterator[str]:
    """A segmentstore server process for the benchmark (the shared launcher, no
    SEGMENTSTORE_* inherited); yields its endpoint."""
    proc = ServerProcess(data_dir, ["--fsync", fsync], http_port=-1)
    proc.start()
    try:
        yield proc.endpoint
    finally:
        with suppress(subprocess.TimeoutExpired):
            proc.stop(20)


def timed(runs: int, prepare: Callable[[int], Any], action: Callable[[Any], None]) -> float:
    """Median seconds of ``runs`` timed calls after one warm-up (``prepare`` is untimed)."""
    times = []
    for i in range(runs + 1):
        arg = prepare(i)
        t0 = time.perf_counter()
        action(arg)
        if i:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--endpoint", help="use a running server instead of starting one")
    ap.add_argument("--fsync", default="always", choices=("always", "interval", "never"))
    ap.add_argument(
        "--variants",
        default="arrow:zstd",
        help="encoding:compression pairs to measure, e.g. arrow:zstd,arrow:lz4,msgpack:none",
    )
    ns = ap.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from segmentstore_client import sync

    work = Path(tempfile.mkdtemp(prefix="bench-spark-"))
    try:
        with _endpoint(ns, work) as endpoint:
            spark = (
                SparkSession.builder.master(ns.master)
                .appName("bench_spark")
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .config("spark.sql.shuffle.partitions", "2")
                .config("spark.driver.bindAddress", "127.0.0.1")
                .config("spark.driver.host", "127.0.0.1")
                .config("spark.driver.memory", "2g")
                .getOrCreate()
            )
            spark.sparkContext.setLogLevel("ERROR")
            spark.dataSource.register(_source())
            cores = spark.sparkContext.defaultParallelism
            df = spark.range(0, ns.rows, 1, cores).selectExpr(
                "id",
                "cast(id % 100000 as int) as k",
                "concat('user-', cast(id % 50000 as string)) as name",
                "cast(id as double) * 1.0001 as amount",
                "timestamp_micros(1700000000000000 + id * 1000) as ts",
                "cast(id % 1000000 as decimal(18, 2)) as price",
            )
            print(
                f"{ns.rows:,} rows x {len(df.columns)} columns, master {ns.master}, "
                f"fsync={ns.fsync if not ns.endpoint else 'as configured'}, "
                f"median of {ns.runs} runs after a warm-up",
                flush=True,
            )
            results: list[tuple[str, float, int, float, float]] = []

            # -- Parquet --------------------------------------------------------------
            pq = work / "parquet"

            def pq_path(i: int) -> str:
                return str(pq / f"run{i}")

            w = timed(ns.runs, pq_path, lambda p: df.write.mode("overwrite").parquet(p))
            size = dir_bytes(pq / "run1")
            r = timed(
                ns.runs,
                lambda i: pq_path(1),
                lambda p: spark.read.parquet(p).write.format("noop").mode("overwrite").save(),
            )
            one = timed(
                ns.runs,
                lambda i: pq_path(1),
                lambda p: (
                    spark.read.parquet(p).select("id").write.format("noop").mode("overwrite").save()
                ),
            )
            results.append(("parquet", w, size, r, one))
            _report(ns.rows, *results[-1])

            # -- segmentstore ---------------------------------------------------------
            for variant in ns.variants.split(","):
                encoding, _, compression = variant.partition(":")
                tag = uuid.uuid4().hex[:8]

                def seg(i: int, tag: str = tag) -> str:
                    return f"bench/{tag}/run{i}"

                def write(s: str, enc: str = encoding, comp: str = compression or "none") -> None:
                    (
                        df.write.format("segmentstore")
                        .option("endpoint", endpoint)
                        .option("segment", s)
                        .option("encoding", enc)
                        .option("compression", comp)
                        .mode("append")
                        .save()
                    )

                def read(s: str, **opts: str) -> None:
                    r = (
                        spark.read.format("segmentstore")
                        .option("endpoint", endpoint)
                        .option("segment", s)
                    )
                    for k, v in opts.items():
                        r = r.option(k, v)
                    r.load().write.format("noop").mode("overwrite").save()

                w = timed(ns.runs, seg, write)
                with sync.connect(endpoint) as client:
                    size = client.segment_info(seg(1)).length
                r = timed(ns.runs, lambda i, seg=seg: seg(1), read)
                one = timed(ns.runs, lambda i, seg=seg: seg(1), lambda s: read(s, columns="id"))
                name = f"segmentstore {encoding}/{compression or 'none'}"
                results.append((name, w, size, r, one))
                _report(ns.rows, *results[-1])

            _, pw, _, pr, _ = results[0]
            print("\nagainst parquet (rows/s ratio; targets: write >= 0.90, read >= 0.90):")
            for name, w, _, r, one in results[1:]:
                print(
                    f"  {name:32s} write {pw / w:5.2f}   read {pr / r:5.2f}"
                    f"   all six / one column {r / one:5.2f} (target >= 2)"
                )
            spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


@contextmanager
def _endpoint(ns: argparse.Namespace, work: Path) -> Iterator[str]:
    if ns.endpoint:
        yield ns.endpoint
        return
    with server(work / "server", ns.fsync) as endpoint:
        yield endpoint


def _source() -> Any:
    """The data source class (what ``register(spark)`` registers; Spark also finds it by
    itself when the package is installed, not when it is an editable install)."""
    from segmentstore_client.spark import SegmentStoreDataSource

    return SegmentStoreDataSource


def _report(rows: int, name: str, write_s: float, size: int, read_s: float, one_s: float) -> None:
    mb = size / 1e6
    print(
        f"{name:32s} write {write_s:6.2f} s {rows / write_s:>11,.0f} rows/s {mb / write_s:7.1f} MB/s"
        f" | read {read_s:6.2f} s {rows / read_s:>11,.0f} rows/s {mb / read_s:7.1f} MB/s"
        f" | one column {one_s:6.2f} s | stored {mb:6.1f} MB",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
