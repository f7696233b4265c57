"""Spark throughput: the ``segmentstore`` format against ``df.write.parquet``, same run.

Writes and reads the same DataFrame (default 1,000,000 rows of six columns: bigint, int,
string, double, timestamp, decimal) with each sink and prints, per figure, the median and
range (min-max) of ``--runs`` timed runs after one untimed warm-up. Reads materialize every
column (``.write.format("noop")``); "one column" reads only ``id`` (Parquet:
``.select("id")``; segmentstore: ``.option("columns", "id")``, since Spark 4 gives Python
sources no column-pruning callback). Writes and reads of the formats alternate run by run,
so a change of load hits both; the ratios are medians of the per-run ratios. A ``noop`` job
over two rows (Spark's floor per query) is timed with the reads, and six/one is also given
above it.

Next to wall time, ``cpu`` is the CPU seconds the run cost the Spark JVM, its Python
workers and this benchmark's server (from ``/proc``): on a loaded machine it moves far
less than wall time, split into the Spark JVM itself (``jvm``), its Python workers (``py``)
and the server. ``gc N x M ms`` is the mean number of the JVM's garbage collections per run
and their time (its GarbageCollectorMXBeans). ``parts`` is the read's input partition count.

    .venv/bin/python scripts/bench_spark.py                     # starts its own server
    .venv/bin/python scripts/bench_spark.py --fsync interval --runs 5
    .venv/bin/python scripts/bench_spark.py --endpoint tcp://127.0.0.1:12345
    .venv/bin/python scripts/bench_spark.py --variants arrow:zstd,arrow:lz4 --batch-rows 10000
    .venv/bin/python scripts/bench_spark.py --writes-only --no-jvm
    .venv/bin/python scripts/bench_spark.py --write-conf spark.sql.execution.arrow.maxBytesPerBatch=2147483647
    .venv/bin/python scripts/bench_spark.py --rows 10000000 --runs 3 --no-python-reads

MB/s counts the bytes each sink stores (segment length; Parquet files' size).

``segmentstore-jvm`` rows (on by default, ``--no-jvm`` to skip; needs a JDK) read the same
arrow segments through the JVM columnar reader (``segmentstore_client.spark.jvm``), its one
column read with ``.select("id")`` as Parquet's, alternating with the others; its write row
writes the same DataFrame with ``format("segmentstore-jvm")`` (the JVM sink, same events)
to its own segment, alternating with Parquet's and the Python sink's writes.
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
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Final

from segmentstore.server.launcher import ServerProcess


@contextmanager
def server(data_dir: Path, fsync: str) -> Iterator[tuple[str, int]]:
    """A segmentstore server process for the benchmark (the shared launcher, no
    SEGMENTSTORE_* inherited); yields its endpoint and pid."""
    proc = ServerProcess(data_dir, ["--fsync", fsync], http_port=-1)
    proc.start()
    try:
        yield proc.endpoint, proc.pid
    finally:
        with suppress(subprocess.TimeoutExpired):
            proc.stop(20)


def session(builder: Any, master: str, name: str, driver_memory: str = "2g") -> Any:
    """The benchmark's SparkSession from ``builder`` (jars and JVM options already set):
    no UI, two shuffle partitions, on 127.0.0.1, a ``driver_memory`` heap, ERROR logs."""
    spark = (
        builder.master(master)
        .appName(name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.memory", driver_memory)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def frame(spark: Any, rows: int, partitions: int) -> Any:
    """The benchmark's DataFrame: ``rows`` rows of six columns (bigint, int, string,
    double, timestamp, decimal(18,2)) in ``partitions`` partitions."""
    return spark.range(0, rows, 1, partitions).selectExpr(
        "id",
        "cast(id % 100000 as int) as k",
        "concat('user-', cast(id % 50000 as string)) as name",
        "cast(id as double) * 1.0001 as amount",
        "timestamp_micros(1700000000000000 + id * 1000) as ts",
        "cast(id % 1000000 as decimal(18, 2)) as price",
    )


NO_SIZE_CHECK: Final = "spark.sql.execution.arrow.maxBytesPerBatch=2147483647"
"""Spark's one value of ``maxBytesPerBatch`` that skips its per-row batch-size check when
it feeds rows to a Python writer (see the README's Spark benchmark, session 11)."""

CLOCK_TICKS: Final = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with suppress(OSError, IndexError, ValueError):
                ppid = int(d.joinpath("stat").read_text().rsplit(")", 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(d.name))
    return kids


def _ticks(pid: int, reaped: bool = True) -> int:
    with suppress(OSError, IndexError, ValueError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return sum(int(f) for f in fields[11 : 15 if reaped else 13])  # utime stime cu cs
    return 0


def cpu_seconds(roots: list[int]) -> float:
    """User + system CPU seconds of ``roots`` and all their descendants, including
    reaped children (so a worker that ended in between still counts)."""
    kids = _children()
    seen: set[int] = set()
    todo = list(roots)
    ticks = 0
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        ticks += _ticks(pid)
        todo.extend(kids.get(pid, []))
    return ticks / CLOCK_TICKS


@dataclass
class Figure:
    """Wall and CPU seconds of the timed runs of one action; ``parts`` splits the CPU
    into the Spark JVM itself, its Python workers and the server."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    parts: dict[str, list[float]] = field(default_factory=dict)
    gcs: list[int] = field(default_factory=list)
    gc_ms: list[int] = field(default_factory=list)

    def text(self) -> str:
        w, c = self.wall, self.cpu
        split = " ".join(f"{k} {statistics.median(v):.2f}" for k, v in self.parts.items())
        gc = (
            f" gc {statistics.mean(self.gcs):.1f} x {statistics.mean(self.gc_ms):.0f} ms"
            if self.gcs
            else ""
        )
        return (
            f"{statistics.median(w):5.2f} s [{min(w):.2f}-{max(w):.2f}]"
            f" cpu {statistics.median(c):5.2f} s" + (f" ({split})" if split else "") + gc
        )


class Timer:
    """Times actions as wall seconds and CPU seconds of the Spark JVM's process tree
    (the JVM alone and its Python workers apart) and of the server."""

    def __init__(self, jvm_pid: int, server_pid: int | None, jvm: Any = None) -> None:
        self.jvm_pid = jvm_pid
        self.server_pid = server_pid
        # The Spark JVM's collectors (py4j), read outside the timed window: how many
        # collections an action caused and their time (G1: the pauses).
        mx = jvm.java.lang.management.ManagementFactory if jvm is not None else None
        self.gc_beans = list(mx.getGarbageCollectorMXBeans()) if mx is not None else []

    def _gc(self) -> tuple[int, int]:
        n = t = 0
        for b in self.gc_beans:
            n += max(int(b.getCollectionCount()), 0)
            t += max(int(b.getCollectionTime()), 0)
        return n, t

    def _sample(self) -> dict[str, float]:
        tree = cpu_seconds([self.jvm_pid])
        jvm = _ticks(self.jvm_pid, reaped=False) / CLOCK_TICKS
        out = {"jvm": jvm, "py": tree - jvm}
        if self.server_pid:
            out["server"] = cpu_seconds([self.server_pid])
        return out

    def run(self, fig: Figure, action: Callable[[], None], timed: bool = True) -> None:
        g0 = self._gc()
        c0, t0 = self._sample(), time.perf_counter()
        action()
        t1, c1 = time.perf_counter(), self._sample()
        g1 = self._gc()
        if timed:
            if self.gc_beans:
                fig.gcs.append(g1[0] - g0[0])
                fig.gc_ms.append(g1[1] - g0[1])
            fig.wall.append(t1 - t0)
            fig.cpu.append(sum(c1.values()) - sum(c0.values()))
            for k, v in c1.items():
                fig.parts.setdefault(k, []).append(v - c0[k])


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
    ap.add_argument(
        "--write-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="also measure every variant's write with this Spark SQL conf set around its"
        " writes only (alternating with the plain writes), e.g."
        f" {NO_SIZE_CHECK}; repeatable",
    )
    ap.add_argument("--batch-rows", help="the reads' batchRows option (default: the source's)")
    ap.add_argument("--no-jvm", action="store_true", help="skip the segmentstore-jvm reader's rows")
    ap.add_argument(
        "--no-python-reads",
        action="store_true",
        help="skip the Python source's reads (the JVM reader's and Parquet's stay)",
    )
    ap.add_argument("--writes-only", action="store_true", help="measure the writes only (no reads)")
    ap.add_argument(
        "--jvm-jar",
        help="the segmentstore-jvm jar to read with (default: jar_path(), this checkout's"
        " sources); for A/B runs against a jar built from other sources",
    )
    ap.add_argument(
        "--jvm-timing",
        action="store_true",
        help="the segmentstore-jvm reader prints a timing line per step on stderr"
        " (-Dsegmentstore.jvm.timing=true: planning, connects, fetch, CRC, decode, Spark's"
        " waits for a batch, Spark)",
    )
    ns = ap.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from segmentstore_client import sync

    work = Path(tempfile.mkdtemp(prefix="bench-spark-"))
    try:
        with _endpoint(ns, work) as (endpoint, server_pid):
            builder = SparkSession.builder
            if not ns.no_jvm:
                from segmentstore_client.spark.jvm import jar_path

                builder = builder.config("spark.jars", ns.jvm_jar or jar_path())
                if ns.jvm_timing:
                    timing = "-Dsegmentstore.jvm.timing=true"
                    builder = builder.config("spark.driver.extraJavaOptions", timing)
            spark = session(builder, ns.master, "bench_spark")
            spark.dataSource.register(_source())
            jvm: Any = spark.sparkContext._jvm
            jvm_pid = int(jvm.java.lang.ProcessHandle.current().pid())
            timer = Timer(jvm_pid, server_pid, jvm)
            cores = spark.sparkContext.defaultParallelism
            df = frame(spark, ns.rows, cores)
            print(
                f"{ns.rows:,} rows x {len(df.columns)} columns, master {ns.master}, "
                f"fsync={ns.fsync if not ns.endpoint else 'as configured'}, "
                f"{ns.runs} runs after a warm-up, load average {_load()}"
                + (f", jar {ns.jvm_jar}" if ns.jvm_jar else ""),
                flush=True,
            )

            def noop(frame: Any) -> None:
                frame.write.format("noop").mode("overwrite").save()

            # -- writes, alternating -----------------------------------------------------
            pq = work / "parquet"
            pq_write = Figure()
            variants = []
            for variant in ns.variants.split(","):
                encoding, _, compression = variant.partition(":")
                v = Variant(encoding, compression or "none", uuid.uuid4().hex[:8])
                v.jvm = not ns.no_jvm and encoding == "arrow"
                variants.append(v)
            tuned = [
                Variant(v.encoding, v.compression, uuid.uuid4().hex[:8], conf=_confs(ns.write_conf))
                for v in variants
                if ns.write_conf
            ]
            for i in range(ns.runs + 1):
                path = str(pq / f"run{i}")
                timer.run(pq_write, partial(df.write.parquet, path), timed=i > 0)
                for v in variants + tuned:
                    timer.run(v.write, partial(v.save, df, endpoint, i), timed=i > 0)
                    if v.jvm:
                        timer.run(v.jvm_write, partial(v.save_jvm, df, endpoint, i), i > 0)
            pq_size = dir_bytes(pq / "run1")
            pq_data = str(pq / "run1")
            with sync.connect(endpoint) as client:
                for v in variants + tuned:
                    v.size = client.segment_info(v.segment(1)).length
                    if v.jvm:
                        v.jvm_size = client.segment_info(v.segment(1, jvm=True)).length

            if ns.writes_only or tuned:
                _report_writes(ns.rows, pq_write, pq_size, variants + tuned)
            if ns.writes_only:
                spark.stop()
                return 0

            # -- reads, alternating ------------------------------------------------------
            pq_read, pq_one, floor = Figure(), Figure(), Figure()
            opts = {"batchRows": ns.batch_rows} if ns.batch_rows else {}
            py_reads = not ns.no_python_reads
            trivial = spark.range(0, 2, 1, cores)
            for i in range(ns.runs + 1):
                timer.run(floor, partial(noop, trivial), timed=i > 0)
                timer.run(pq_read, lambda: noop(spark.read.parquet(pq_data)), timed=i > 0)
                for v in variants:
                    if py_reads:
                        timer.run(v.read, partial(v.scan, spark, endpoint, opts), i > 0)
                    if v.jvm:
                        timer.run(v.jvm_read, partial(v.scan_jvm, spark, endpoint, ()), i > 0)
                timer.run(pq_one, lambda: noop(spark.read.parquet(pq_data).select("id")), i > 0)
                for v in variants:
                    one = {**opts, "columns": "id"}
                    if py_reads:
                        timer.run(v.one, partial(v.scan, spark, endpoint, one), i > 0)
                    if v.jvm:
                        timer.run(v.jvm_one, partial(v.scan_jvm, spark, endpoint, ("id",)), i > 0)
            pq_parts = spark.read.parquet(pq_data).rdd.getNumPartitions()
            _report(ns.rows, "parquet", pq_write, pq_size, pq_read, pq_one, pq_parts)
            for v in variants:
                if py_reads:
                    parts = v.load(spark, endpoint, opts).rdd.getNumPartitions()
                    _report(ns.rows, v.name, v.write, v.size, v.read, v.one, parts)
                else:
                    rate = ns.rows / statistics.median(v.write.wall)
                    print(f"{v.name:28s} write {v.write.text()} {rate:>10,.0f} rows/s")
                if v.jvm:
                    parts = v.load_jvm(spark, endpoint).rdd.getNumPartitions()
                    _report(ns.rows, v.jvm_name, None, v.size, v.jvm_read, v.jvm_one, parts)
                    _report_jvm_write(ns.rows, v)
            print(f"{'spark floor (noop over 2 rows)':28s} {floor.text()}")

            print(
                "\nagainst parquet (median of per-run rows/s ratios [range];"
                " targets: write >= 0.90, read >= 0.90, six/one >= 2);"
                " six/one above the floor = (six - floor) / (one - floor), per run:"
            )
            print(f"  {'parquet':28s} {'':19s}  six/one column {_six_one(pq_read, pq_one, floor)}")
            for v in variants:
                w = f"write {_ratio(pq_write.wall, v.write.wall)}"
                if py_reads:
                    print(
                        f"  {v.name:28s} {w}"
                        f"  read {_ratio(pq_read.wall, v.read.wall)}"
                        f"  read cpu {_ratio(pq_read.cpu, v.read.cpu)}"
                        f"  six/one column {_six_one(v.read, v.one, floor)}"
                    )
                else:
                    print(f"  {v.name:28s} {w}")
                if v.jvm:
                    jw = f"write {_ratio(pq_write.wall, v.jvm_write.wall)}"
                    jw += f"  write cpu {_ratio(pq_write.cpu, v.jvm_write.cpu)}"
                    print(
                        f"  {v.jvm_name:28s} {jw}"
                        f"  read {_ratio(pq_read.wall, v.jvm_read.wall)}"
                        f"  read cpu {_ratio(pq_read.cpu, v.jvm_read.cpu)}"
                        f"  six/one column {_six_one(v.jvm_read, v.jvm_one, floor)}"
                    )
            print(f"load average at the end: {_load()}")
            spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


@dataclass
class Variant:
    """One encoding/compression of the segmentstore format and its figures."""

    encoding: str
    compression: str
    tag: str
    size: int = 0
    write: Figure = field(default_factory=Figure)
    read: Figure = field(default_factory=Figure)
    one: Figure = field(default_factory=Figure)
    jvm: bool = False
    jvm_read: Figure = field(default_factory=Figure)
    jvm_one: Figure = field(default_factory=Figure)
    jvm_write: Figure = field(default_factory=Figure)
    jvm_size: int = 0
    conf: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        tail = "".join(f" {k.rsplit('.', 1)[-1]}={v}" for k, v in self.conf.items())
        return f"segmentstore {self.encoding}/{self.compression}{tail}"

    @property
    def jvm_name(self) -> str:
        return f"segmentstore-jvm {self.encoding}/{self.compression}"

    def segment(self, run: int, jvm: bool = False) -> str:
        return f"bench/{self.tag}{'-jvm' if jvm else ''}/run{run}"

    def save_jvm(self, df: Any, endpoint: str, run: int) -> None:
        """The JVM sink's write of ``df`` (Spark's default session settings)."""
        from segmentstore_client.spark.jvm import FORMAT

        (
            df.write.format(FORMAT)
            .option("endpoint", endpoint)
            .option("segment", self.segment(run, jvm=True))
            .option("compression", self.compression)
            .mode("append")
            .save()
        )

    def save(self, df: Any, endpoint: str, run: int) -> None:
        conf = df.sparkSession.conf
        for k, val in self.conf.items():
            conf.set(k, val)
        try:
            self._save(df, endpoint, run)
        finally:
            for k in self.conf:
                conf.unset(k)

    def _save(self, df: Any, endpoint: str, run: int) -> None:
        (
            df.write.format("segmentstore")
            .option("endpoint", endpoint)
            .option("segment", self.segment(run))
            .option("encoding", self.encoding)
            .option("compression", self.compression)
            .mode("append")
            .save()
        )

    def scan(self, spark: Any, endpoint: str, options: dict[str, str]) -> None:
        """Read every row of the run-1 segment (materialized, then dropped)."""
        self.load(spark, endpoint, options).write.format("noop").mode("overwrite").save()

    def scan_jvm(self, spark: Any, endpoint: str, columns: tuple[str, ...]) -> None:
        """The run-1 segment through the JVM reader (``columns``: Spark's pruning)."""
        frame = self.load_jvm(spark, endpoint)
        frame = frame.select(*columns) if columns else frame
        frame.write.format("noop").mode("overwrite").save()

    def load_jvm(self, spark: Any, endpoint: str) -> Any:
        from segmentstore_client.spark.jvm import FORMAT

        r = spark.read.format(FORMAT).option("endpoint", endpoint)
        return r.option("segment", self.segment(1)).load()

    def load(self, spark: Any, endpoint: str, options: dict[str, str]) -> Any:
        r = spark.read.format("segmentstore").option("endpoint", endpoint)
        r = r.option("segment", self.segment(1))
        for k, val in options.items():
            r = r.option(k, val)
        return r.load()


def _report_jvm_write(rows: int, v: Variant) -> None:
    w = statistics.median(v.jvm_write.wall)
    mb = v.jvm_size / 1e6
    print(
        f"{'':28s} write {v.jvm_write.text()} {rows / w:>10,.0f} rows/s {mb / w:6.1f} MB/s"
        f" | stored {mb:6.1f} MB (segmentstore-jvm sink)"
    )


def _report_writes(rows: int, pq_write: Figure, pq_size: int, variants: list[Variant]) -> None:
    jvm = [(v.jvm_name, v.jvm_write, v.jvm_size) for v in variants if v.jvm and v.jvm_write.wall]
    for name, fig, size in (
        [("parquet", pq_write, pq_size)] + [(v.name, v.write, v.size) for v in variants] + jvm
    ):
        w = statistics.median(fig.wall)
        print(
            f"{name:46s} write {fig.text()} {rows / w:>10,.0f} rows/s {size / 1e6 / w:6.1f} MB/s"
            f" | stored {size / 1e6:6.1f} MB"
        )
    print("\nagainst parquet (median of per-run ratios [range]; target: write >= 0.90):")
    for v in variants:
        print(
            f"  {v.name:46s} write {_ratio(pq_write.wall, v.write.wall)}"
            f"  write cpu {_ratio(pq_write.cpu, v.write.cpu)}"
        )
        if v.jvm and v.jvm_write.wall:
            print(
                f"  {v.jvm_name:46s} write {_ratio(pq_write.wall, v.jvm_write.wall)}"
                f"  write cpu {_ratio(pq_write.cpu, v.jvm_write.cpu)}"
            )
    print(f"load average at the end: {_load()}")


def _confs(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--write-conf wants KEY=VALUE, not {pair!r}")
        out[key.strip()] = value.strip()
    return out


def _six_one(six: Figure, one: Figure, floor: Figure) -> str:
    """Six columns against one: the median ratio [range], then the same with Spark's
    floor (a ``noop`` job over two rows, same run) taken off both."""
    above = [
        (s - f) / (o - f) if o > f else float("inf")
        for s, o, f in zip(six.wall, one.wall, floor.wall, strict=True)
    ]
    return f"{_ratio(six.wall, one.wall)}, above the floor {statistics.median(above):4.2f}"


def _ratio(base: list[float], other: list[float]) -> str:
    """Median and range of the per-run ratios ``base[i] / other[i]``."""
    rs = [b / o for b, o in zip(base, other, strict=True)]
    return f"{statistics.median(rs):4.2f} [{min(rs):.2f}-{max(rs):.2f}]"


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


@contextmanager
def _endpoint(ns: argparse.Namespace, work: Path) -> Iterator[tuple[str, int | None]]:
    """The endpoint to use and the pid of the server this benchmark started (if any)."""
    if ns.endpoint:
        yield ns.endpoint, None
        return
    with server(work / "server", ns.fsync) as started:
        yield started


def _source() -> Any:
    """The data source class (what ``register(spark)`` registers; Spark also finds it by
    itself when the package is installed, not when it is an editable install)."""
    from segmentstore_client.spark import SegmentStoreDataSource

    return SegmentStoreDataSource


def _report(
    rows: int, name: str, write: Figure | None, size: int, read: Figure, one: Figure, parts: int
) -> None:
    mb = size / 1e6
    r = statistics.median(read.wall)
    if write is not None:
        w = statistics.median(write.wall)
        print(f"{name:28s} write {write.text()} {rows / w:>10,.0f} rows/s {mb / w:6.1f} MB/s")
    print(
        f"{name if write is None else '':28s} read  {read.text()} {rows / r:>10,.0f} rows/s {mb / r:6.1f} MB/s"
        f" parts {parts}\n"
        f"{'':28s} one column {one.text()} | stored {mb:6.1f} MB",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
