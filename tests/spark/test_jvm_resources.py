"""What a ``segmentstore-jvm`` write or read leaves in the Spark JVM once it returns: no
client or socket to the server, no thread of its own but the one write watchdog, no
Arrow memory (Allocators: every task's allocator is a child of one root), no watchdog
still queued, whether the write succeeded or the server went away mid-write
(session 14: the JVM's memory over 20 writes plateaus; see the README's Spark section and
``scripts/bench_spark_memory.py``). Local mode: the driver is the executor, so /proc of
the driver JVM shows the tasks' sockets."""

from __future__ import annotations

import os
from functools import partial
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


def _static(spark: Any, cls: str, name: str) -> Any:
    """What a package-private static method of the jar returns (by reflection; spark.jars
    are loaded by Spark's class loader)."""
    jvm = spark._jvm
    loader = jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
    c = jvm.java.lang.Class.forName(cls, True, loader)
    none = jvm.java.lang.reflect.Array.newInstance
    m = c.getDeclaredMethod(name, none(jvm.java.lang.Class.forName("java.lang.Class"), 0))
    m.setAccessible(True)
    return m.invoke(None, none(jvm.java.lang.Class.forName("java.lang.Object"), 0))


def _left(spark: Any, start: dict[str, Any] | None = None, *ports: int) -> dict[str, Any]:
    """What the last write or read left behind since ``start`` (another ``_left``): all
    empty or zero when it cleaned up (counts since the test began, so an earlier test's
    leftovers do not count here)."""
    pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())
    threads = spark._jvm.java.lang.Thread.getAllStackTraces().keySet()
    names = sorted(str(t.getName()) for t in threads)
    ours = "io.segmentstore.spark."
    left = {
        # A client not closed: its socket too, until a collection finds it unreachable
        # (the JDK's cleaner); a reset socket has left /proc/net/tcp, not the count.
        "clients open": _static(spark, ours + "WireClient", "open"),
        "sockets": [s for p in ports for s in _sockets_to(pid, p)],
        "threads": [n for n in names if n.startswith("segmentstore-jvm") and n != WATCHDOG],
        "arrow bytes": _static(spark, ours + "Allocators", "allocated"),
        "watchdogs queued": _static(spark, ours + "WireClient", "watchdogsQueued"),
    }
    for k in ("clients open", "arrow bytes"):
        left[k] -= start[k] if start else 0
    return left


CLEAN = {"clients open": 0, "sockets": [], "threads": [], "arrow bytes": 0, "watchdogs queued": 0}


def test_writes_and_reads_leave_nothing_behind(spark: Any, endpoint: str, seg: str) -> None:
    port = _port(endpoint)
    start = _left(spark)
    df = _df(spark, 20_000, partitions=2)
    for i in range(4):  # 200 appends each, every one under its watchdog
        _save(df, endpoint, f"{seg}{i}", rowsPerEvent="100")
        assert _left(spark, start, port) == CLEAN, f"after write {i + 1}"
    for i in range(2):
        frame = spark.read.format(FORMAT).option("endpoint", endpoint).option("segment", f"{seg}0")
        frame.load().write.format("noop").mode("overwrite").save()
        assert _left(spark, start, port) == CLEAN, f"after read {i + 1}"


@pytest.mark.parametrize("stall", [False, True], ids=["server-closes", "server-stops-reading"])
def test_a_write_failing_mid_way_leaves_nothing_behind(
    spark: Any, endpoint: str, seg: str, stall: bool
) -> None:
    """Every attempt (three: local[2,3]) fails: the proxy closes the connection after
    256 KiB, or stops reading there and the write watchdog closes it after 1 s (once the
    sockets' buffers are full: hence rows of ~15 KB). Counted while the proxy still holds
    its side, so a socket the JVM kept would show."""
    start = _left(spark)
    proxy = _CuttingProxy(endpoint, limit=256 * 1024, stall=stall)
    try:
        df = spark.range(0, 3000, 1, 1).selectExpr("id", "repeat(cast(id as string), 4000) s")
        for i in range(2):
            target = f"{seg}{i}"
            opts = {"rowsPerEvent": "50", "compression": "none", "timeout": "1"}
            msg = _error(partial(_save, df, proxy.endpoint, target, **opts))
            assert "segmentstore-jvm" in msg and f"segment '{target}'" in msg, msg
            left = _left(spark, start, _port(proxy.endpoint), _port(endpoint))
            assert left == CLEAN, f"after failed write {i + 1}"
    finally:
        proxy.close()
