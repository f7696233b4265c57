"""The disk's ceiling for a durable write of a given size (issue 19, round 6): MB/s of
back-to-back writes that are each durable before the next starts, at several sizes, with
``pwritev(..., RWF_DSYNC)`` (what the log does in fsync=always) and with ``pwrite`` +
``fdatasync`` (its fallback), into a preallocated file in --dir. The log's group commit
writes whatever arrived during the previous sync as one batch, so this bounds what one
stream of large appends can reach at fsync=always before any Python runs.

``--small N`` (issue 19, round 7) measures the other end instead: the latency of N durable
128 B writes (``pwritev(RWF_DSYNC)`` at growing offsets, what a lone append's batch costs
the log), one every ``--gap-ms`` and back to back, as p50 / p90 / p99 / max. Its p99 is the
floor under any server's ack p99 at fsync=always on this disk; run it beside
``bench_peers.py`` or ``bench_latency.py`` to judge a latency target against the disk.

    .venv/bin/python scripts/bench_sync_sizes.py                 # 1, 4, 8 MiB, 64 MiB each
    .venv/bin/python scripts/bench_sync_sizes.py --sizes-mib 1,16 --total-mib 128
    .venv/bin/python scripts/bench_sync_sizes.py --small 3000   # 128 B, 1 ms apart and not
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

SMALL = 128  # bytes of one small durable write: about one 100 B append's log record


def rate(path: str, size: int, total: int, dsync: bool) -> float:
    """MB/s of ``total`` bytes written ``size`` at a time, each durable before the next."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.posix_fallocate(fd, 0, total)
        os.fsync(fd)
        buf = os.urandom(size)
        t0 = time.perf_counter()
        for off in range(0, total - size + 1, size):
            if dsync:
                os.pwritev(fd, [buf], off, os.RWF_DSYNC)
            else:
                os.pwrite(fd, buf, off)
                os.fdatasync(fd)
        return (total // size) * size / (time.perf_counter() - t0) / 1e6
    finally:
        os.close(fd)
        os.unlink(path)


def small_sync_latencies(path: str, count: int, gap: float) -> list[float]:
    """Seconds each of ``count`` durable ``SMALL``-byte writes took, one every ``gap``
    seconds (0: back to back), appended at growing offsets of a preallocated file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.posix_fallocate(fd, 0, count * SMALL)
        os.fsync(fd)
        buf = os.urandom(SMALL)
        out = []
        perf = time.perf_counter
        for i in range(count):
            t0 = perf()
            os.pwritev(fd, [buf], i * SMALL, os.RWF_DSYNC)
            out.append(perf() - t0)
            if gap:
                time.sleep(gap)
        return out
    finally:
        os.close(fd)
        os.unlink(path)


def quantiles_us(xs: list[float]) -> str:
    cuts = statistics.quantiles(xs, n=100, method="inclusive")
    return (
        f"p50 {cuts[49] * 1e6:6.0f} us   p90 {cuts[89] * 1e6:6.0f} us   "
        f"p99 {cuts[98] * 1e6:6.0f} us   max {max(xs) * 1e6:6.0f} us"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes-mib", default="1,4,8", help="write sizes, MiB, comma-separated")
    p.add_argument("--total-mib", type=int, default=64, help="bytes written per size and mode")
    p.add_argument("--dir", default=None, help="where the file goes (default: the temp dir)")
    p.add_argument("--small", type=int, default=0, help="N small durable writes (see above)")
    p.add_argument("--gap-ms", type=float, default=1.0, help="with --small: time between")
    args = p.parse_args()
    if args.small < 0 or args.small == 1 or args.gap_ms < 0:
        p.error("--small needs at least 2 writes and --gap-ms must not be negative")
    total = args.total_mib << 20
    with tempfile.TemporaryDirectory(prefix="bench-sync-", dir=args.dir) as d:
        path = os.path.join(d, "probe")
        if args.small:
            for gap in (args.gap_ms / 1000, 0.0):
                xs = small_sync_latencies(path, args.small, gap)
                how = f"one every {gap * 1000:g} ms" if gap else "back to back"
                print(
                    f"{SMALL} B pwritev(RWF_DSYNC), {args.small} writes {how}: {quantiles_us(xs)}"
                )
            return
        for mib in (int(x) for x in args.sizes_mib.split(",")):
            size = mib << 20
            both = [rate(path, size, total, dsync) for dsync in (True, False)]
            print(
                f"{mib:3d} MiB per durable write: pwritev(RWF_DSYNC) {both[0]:5.0f} MB/s, "
                f"pwrite + fdatasync {both[1]:5.0f} MB/s"
            )


if __name__ == "__main__":
    main()
