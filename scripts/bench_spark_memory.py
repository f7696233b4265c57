"""The Spark JVM's memory across repeated writes and reads in one session: leak or plateau.

Runs ``--writes`` writes of the benchmark's DataFrame (``bench_spark.py``: 1,000,000 rows x
6 columns) with ``format("segmentstore-jvm")`` (each to a new segment), then ``--reads``
full reads of the first segment with the JVM reader, then ``--parquet`` Parquet writes, in
one ``local[2]`` session with the benchmark's 2 GiB driver heap. After each it prints the
driver JVM's (local mode: also the executor's) resident set, its heap after
``System.gc()`` (``--no-gc``: as found) and the heap G1 has committed, metaspace, the
``direct`` and
``mapped`` buffer pools, the Arrow memory this jar's tasks hold (``Allocators``: 0 between
jobs unless one leaked) and the netty arenas' chunks under every Arrow allocator, the
reader's pooled arrays (``Buffers``), the jar's clients not closed and write watchdogs
queued, threads, file descriptors (sockets apart) and, with
``--nmt``, the JVM's native memory (``-XX:NativeMemoryTracking=summary``, via ``jcmd``).
The last lines give each measure's growth per operation over the second half of each
phase (a least-squares slope): a leak grows linearly, a warming JVM plateaus.

    .venv/bin/python scripts/bench_spark_memory.py --nmt
    .venv/bin/python scripts/bench_spark_memory.py --no-gc --nmt --idle 70
    .venv/bin/python scripts/bench_spark_memory.py --writes 30 --reads 0 --parquet 0 --rows 200000
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_spark import frame, server, session

MB = 1024 * 1024
HISTO = re.compile(
    r"io\.segmentstore|ScheduledFutureTask|RootAllocator|VectorSchemaRoot|java\.net\.Socket\b"
    r"|ArrowBuf\b|BufferLedger"
)
NMT_LINE = re.compile(r"-\s+(\w[\w ]*?) \(reserved=(\d+)KB, committed=(\d+)KB\)")
NMT_KINDS = {
    "Class": "nClass",
    "Thread": "nThread",
    "Code": "nCode",
    "GC": "nGC",
    "Internal": "nIntern",
    "Other": "nOther",
    "Symbol": "nSymbol",
    "Arena Chunk": "nArena",
}
"""NMT's categories printed, by their short column names."""


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _fds(pid: int) -> tuple[int, int]:
    """Open file descriptors of ``pid`` and how many of them are sockets."""
    total = sockets = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        total += 1
        with suppress(OSError):
            sockets += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
    return total, sockets


def _nmt(pid: int) -> dict[str, float]:
    """Committed MB per NMT category (and ``NMT`` for the total), via jcmd."""
    jcmd = shutil.which("jcmd") or "jcmd"
    out = subprocess.run(
        [jcmd, str(pid), "VM.native_memory", "summary"], capture_output=True, text=True, timeout=60
    ).stdout
    found = {m[1].strip(): int(m[3]) * 1024 / MB for m in NMT_LINE.finditer(out)}
    total = re.search(r"Total: reserved=\d+KB, committed=(\d+)KB", out)
    found["NMT"] = int(total[1]) * 1024 / MB if total else float("nan")
    return found


class Probe:
    """Samples of the Spark driver JVM (py4j for what only the JVM knows, /proc the rest)."""

    def __init__(self, jvm: Any, nmt: bool, gc: bool) -> None:
        self.jvm = jvm
        self.nmt = nmt
        self.gc = gc
        self.pid = int(jvm.java.lang.ProcessHandle.current().pid())
        mf = jvm.java.lang.management.ManagementFactory
        self.memory = mf.getMemoryMXBean()
        self.threads = mf.getThreadMXBean()
        cls = jvm.java.lang.Class.forName("java.lang.management.BufferPoolMXBean")
        self.pools = list(mf.getPlatformMXBeans(cls))
        self.spaces = [b for b in mf.getMemoryPoolMXBeans() if str(b.getName()) == "Metaspace"]
        ours = "io.segmentstore.spark."
        self.arrow = self._method(ours + "Allocators", "allocated")
        self.buffers = self._method(ours + "Buffers", "pooled")
        self.clients = self._method(ours + "WireClient", "open")
        self.watchdogs = self._method(ours + "WireClient", "watchdogsQueued")
        self.none = jvm.java.lang.reflect.Array.newInstance(
            jvm.java.lang.Class.forName("java.lang.Object"), 0
        )

    def _class(self, name: str) -> Any:
        # spark.jars are loaded by Spark's class loader, not the JVM's application one.
        loader = self.jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
        return self.jvm.java.lang.Class.forName(name, True, loader)

    def _method(self, cls: str, name: str) -> Any:
        empty = self.jvm.java.lang.Class.forName("java.lang.Class")
        m = self._class(cls).getDeclaredMethod(
            name, self.jvm.java.lang.reflect.Array.newInstance(empty, 0)
        )
        m.setAccessible(True)
        return m

    def sample(self) -> dict[str, float]:
        if self.gc:
            self.jvm.java.lang.System.gc()
        heap = self.memory.getHeapMemoryUsage()
        s: dict[str, float] = {
            "rss": _rss(self.pid) / MB,
            "heap": heap.getUsed() / MB,
            "heapC": heap.getCommitted() / MB,
            "meta": sum(b.getUsage().getUsed() for b in self.spaces) / MB,
        }
        for p in self.pools:
            name = str(p.getName())
            if name in ("direct", "mapped"):
                s[name] = p.getMemoryUsed() / MB
        s["arrow"] = self.arrow.invoke(None, self.none) / MB
        s["netty"] = self.jvm.io.netty.util.internal.PlatformDependent.usedDirectMemory() / MB
        s["pooled"] = float(self.buffers.invoke(None, self.none))
        s["clients"] = float(self.clients.invoke(None, self.none))
        s["wdogs"] = float(self.watchdogs.invoke(None, self.none))
        s["threads"] = float(self.threads.getThreadCount())
        fds, socks = _fds(self.pid)
        s["fds"], s["socks"] = float(fds), float(socks)
        if self.nmt:
            n = _nmt(self.pid)
            s["NMT"] = n["NMT"]
            for k, short in NMT_KINDS.items():
                s[short] = n.get(k, float("nan"))
        return s

    def histogram(self) -> list[str]:
        """The live instances of this jar's classes and of the Arrow, socket and
        scheduled-task classes a leak would keep (``jcmd GC.class_histogram``)."""
        out = subprocess.run(
            [shutil.which("jcmd") or "jcmd", str(self.pid), "GC.class_histogram"],
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
        return [ln for ln in out.splitlines() if HISTO.search(ln)]

    def thread_names(self) -> list[str]:
        keys = self.jvm.java.lang.Thread.getAllStackTraces().keySet()
        return sorted(str(t.getName()) for t in keys)


def _pools(names: list[str]) -> str:
    """Thread names with their trailing numbers counted: ``pool-N`` x 12."""
    counts: dict[str, int] = {}
    for n in names:
        key = re.sub(r"\d+$", "N", n)
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{k} x {v}" if v > 1 else k for k, v in sorted(counts.items()))


def _slope(ys: list[float]) -> float:
    n = len(ys)
    if n < 2:
        return 0.0
    mx, my = (n - 1) / 2, sum(ys) / n
    return sum((i - mx) * (y - my) for i, y in enumerate(ys)) / sum((i - mx) ** 2 for i in range(n))


def _fmt(k: str, v: float) -> str:
    return (
        f"{v:7.0f}"
        if k in ("threads", "fds", "socks", "pooled", "clients", "wdogs")
        else f"{v:7.1f}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--writes", type=int, default=20)
    ap.add_argument("--reads", type=int, default=20)
    ap.add_argument("--parquet", type=int, default=20)
    ap.add_argument(
        "--rows-per-event", type=int, default=10_000, help="the JVM writes' rowsPerEvent"
    )
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--driver-memory", default="2g", help="as bench_spark.py")
    ap.add_argument("--nmt", action="store_true", help="-XX:NativeMemoryTracking=summary, via jcmd")
    ap.add_argument(
        "--no-gc",
        action="store_true",
        help="sample without System.gc() first (heap is then what is used, live or not)",
    )
    ap.add_argument(
        "--idle",
        type=float,
        default=0,
        help="then wait this many seconds and sample once more (Spark's cached thread pools"
        " let an idle thread go after 60 s)",
    )
    ap.add_argument(
        "--histo",
        action="store_true",
        help="after each phase, the live instances of this jar's classes and a few others",
    )
    ns = ap.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    work = Path(tempfile.mkdtemp(prefix="bench-spark-memory-"))
    try:
        with server(work / "server", "never") as (endpoint, _):
            _run(ns, work, endpoint)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _run(ns: argparse.Namespace, work: Path, endpoint: str) -> None:
    from pyspark.sql import SparkSession
    from segmentstore_client.spark.jvm import FORMAT, jar_path

    builder = SparkSession.builder.config("spark.jars", jar_path())
    if ns.nmt:
        builder = builder.config(
            "spark.driver.extraJavaOptions", "-XX:NativeMemoryTracking=summary"
        )
    spark = session(builder, ns.master, "bench_spark_memory", ns.driver_memory)
    cores = spark.sparkContext.defaultParallelism
    df = frame(spark, ns.rows, cores)

    def jvm_write(i: int) -> None:
        w = df.write.format(FORMAT).option("endpoint", endpoint)
        w = w.option("segment", f"mem/w/{i}").option("rowsPerEvent", str(ns.rows_per_event))
        w.option("compression", "zstd").mode("append").save()

    def jvm_read(i: int) -> None:
        r = spark.read.format(FORMAT).option("endpoint", endpoint).option("segment", "mem/w/0")
        r.load().write.format("noop").mode("overwrite").save()

    def parquet(i: int) -> None:
        df.write.parquet(str(work / "parquet" / str(i)))
        shutil.rmtree(work / "parquet" / str(i))

    probe = Probe(spark.sparkContext._jvm, ns.nmt, not ns.no_gc)
    base = probe.sample()
    names0 = probe.thread_names()
    keys = list(base)
    print(
        f"{ns.rows:,} rows x {len(df.columns)} columns, {ns.master}, driver memory "
        f"{ns.driver_memory}, jvm pid {probe.pid}; MB unless a count"
    )
    print(f"{'op':14s}{'s':>6s}" + "".join(f"{k:>8s}" for k in keys))
    print(f"{'start':14s}{'':6s}" + "".join(" " + _fmt(k, base[k]) for k in keys), flush=True)
    phases: list[tuple[str, int, Callable[[int], None]]] = [
        ("jvm write", ns.writes, jvm_write),
        ("jvm read", ns.reads, jvm_read),
        ("parquet write", ns.parquet, parquet),
    ]
    rows: dict[str, list[dict[str, float]]] = {}
    for name, n, action in phases:
        for i in range(n):
            t0 = time.perf_counter()
            action(i)
            took = time.perf_counter() - t0
            s = probe.sample()
            rows.setdefault(name, []).append(s)
            print(
                f"{name + ' ' + str(i + 1):14s}{took:6.2f}"
                + "".join(" " + _fmt(k, s[k]) for k in keys),
                flush=True,
            )
        if n:
            gained = sorted(set(probe.thread_names()) - set(names0))
            print(f"threads new since the start: {_pools(gained)}")
        if n and ns.histo:
            print("\n".join(probe.histogram()))
    if ns.idle:
        time.sleep(ns.idle)
        s = probe.sample()
        print(f"{'idle':14s}{ns.idle:6.0f}" + "".join(" " + _fmt(k, s[k]) for k in keys))
        print(
            f"threads new since the start: {_pools(sorted(set(probe.thread_names()) - set(names0)))}"
        )
    print("growth per operation over the second half of each phase (least squares):")
    for name, samples in rows.items():
        half = samples[len(samples) // 2 :]
        print(
            f"{name:14s}{'':6s}" + "".join(f" {_slope([s[k] for s in half]):+7.2f}" for k in keys)
        )
    spark.stop()


if __name__ == "__main__":
    sys.exit(main())
