"""What a ``segmentstore-jvm`` write or read leaves in the Spark JVM once it returns: no
socket to the server, no thread of its own but the one write watchdog, no Arrow memory,
no watchdog still queued, whether the write succeeded or the server went away mid-write
(session 14: the JVM's memory over 20 writes plateaus; see the README's Spark section and
``scripts/bench_spark_memory.py``). Local mode: the driver is the executor, so /proc of
the driver JVM shows the tasks' sockets."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from segmentstore_client.spark.jvm import FORMAT

from .test_jvm_writer import _CuttingProxy, _df, _error, _save

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("jvm_jar")]

WATCHDOG = "segmentstore-jvm-write-watchdog"


def _port(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1])


def _sockets_to(pid: int, port: int) -> list[str]:
    """The TCP states of the sockets ``pid`` holds open to a peer on 127.0.0.1:``port``."""
    mine = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if link.startswith("socket:["):
            mine.add(link[8:-1])
    states = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if int(f[2].rsplit(":", 1)[1], 16) == port and f[9] in mine:
                states.append({"01": "ESTABLISHED", "08": "CLOSE_WAIT"}.get(f[3], f[3]))
    return states


def _static(spark: Any, cls: str, name: str, field: bool = False) -> Any:
    """A package-private static of the jar or of Arrow (by reflection; spark.jars are
    loaded by Spark's class loader)."""
    jvm = spark._jvm
    loader = jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
    c = jvm.java.lang.Class.forName(cls, True, loader)
    if field:
        f = c.getDeclaredField(name)
        f.setAccessible(True)
        return f.get(None)
    none = jvm.java.lang.reflect.Array.newInstance
    m = c.getDeclaredMethod(name, none(jvm.java.lang.Class.forName("java.lang.Class"), 0))
    m.setAccessible(True)
    return m.invoke(None, none(jvm.java.lang.Class.forName("java.lang.Object"), 0))


def _arrow_bytes(spark: Any) -> int:
    """Bytes of live Arrow buffers in the JVM, every allocator's (Arrow's netty allocation
    manager, which Spark's jars select, counts them as it hands them out)."""
    inner = _static(
        spark, "org.apache.arrow.memory.netty.NettyAllocationManager", "INNER_ALLOCATOR", True
    )
    return int(inner.getHugeBufferSize()) + int(inner.getNormalBufferSize())


def _left(spark: Any, arrow_before: int, *ports: int) -> dict[str, Any]:
    """What the last write or read left behind (all empty or zero when it cleaned up)."""
    pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())
    threads = spark._jvm.java.lang.Thread.getAllStackTraces().keySet()
    names = sorted(str(t.getName()) for t in threads)
    return {
        "sockets": [s for p in ports for s in _sockets_to(pid, p)],
        "threads": [n for n in names if n.startswith("segmentstore-jvm") and n != WATCHDOG],
        "arrow bytes": _arrow_bytes(spark) - arrow_before,
        "watchdogs queued": _static(spark, "io.segmentstore.spark.WireClient", "watchdogsQueued"),
    }


CLEAN = {"sockets": [], "threads": [], "arrow bytes": 0, "watchdogs queued": 0}


def test_writes_and_reads_leave_nothing_behind(spark: Any, endpoint: str, seg: str) -> None:
    port = _port(endpoint)
    before = _arrow_bytes(spark)
    df = _df(spark, 20_000, partitions=2)
    for i in range(4):  # 200 appends each, every one under its watchdog
        _save(df, endpoint, f"{seg}{i}", rowsPerEvent="100")
        assert _left(spark, before, port) == CLEAN, f"after write {i + 1}"
    for i in range(2):
        frame = spark.read.format(FORMAT).option("endpoint", endpoint).option("segment", f"{seg}0")
        frame.load().write.format("noop").mode("overwrite").save()
        assert _left(spark, before, port) == CLEAN, f"after read {i + 1}"


@pytest.mark.parametrize("stall", [False, True], ids=["server-closes", "server-stops-reading"])
def test_a_write_failing_mid_way_leaves_nothing_behind(
    spark: Any, endpoint: str, seg: str, stall: bool
) -> None:
    """Every attempt (three: local[2,3]) fails: the proxy closes the connection after
    256 KiB, or stops reading there and the write watchdog closes it after 1 s (once the
    sockets' buffers are full: hence rows of ~15 KB). Counted
    while the proxy still holds its side, so a socket the JVM kept would show."""
    before = _arrow_bytes(spark)
    proxy = _CuttingProxy(endpoint, limit=256 * 1024, stall=stall)
    try:
        df = spark.range(0, 3000, 1, 1).selectExpr("id", "repeat(cast(id as string), 4000) s")
        for i in range(2):
            msg = _error(
                lambda i=i: _save(
                    df,
                    proxy.endpoint,
                    f"{seg}{i}",
                    rowsPerEvent="50",
                    compression="none",
                    timeout="1",
                )
            )
            assert "segmentstore-jvm" in msg and f"segment '{seg}{i}'" in msg, msg
            left = _left(spark, before, _port(proxy.endpoint), _port(endpoint))
            assert left == CLEAN, f"after failed write {i + 1}"
    finally:
        proxy.close()
