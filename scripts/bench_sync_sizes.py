"""The disk's ceiling for a durable write of a given size (issue 19, round 6): MB/s of
back-to-back writes that are each durable before the next starts, at several sizes, with
``pwritev(..., RWF_DSYNC)`` (what the log does in fsync=always) and with ``pwrite`` +
``fdatasync`` (its fallback), into a preallocated file in --dir. The log's group commit
writes whatever arrived during the previous sync as one batch, so this bounds what one
stream of large appends can reach at fsync=always before any Python runs.

    .venv/bin/python scripts/bench_sync_sizes.py                 # 1, 4, 8 MiB, 64 MiB each
    .venv/bin/python scripts/bench_sync_sizes.py --sizes-mib 1,16 --total-mib 128
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time


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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes-mib", default="1,4,8", help="write sizes, MiB, comma-separated")
    p.add_argument("--total-mib", type=int, default=64, help="bytes written per size and mode")
    p.add_argument("--dir", default=None, help="where the file goes (default: the temp dir)")
    args = p.parse_args()
    total = args.total_mib << 20
    with tempfile.TemporaryDirectory(prefix="bench-sync-", dir=args.dir) as d:
        path = os.path.join(d, "probe")
        for mib in (int(x) for x in args.sizes_mib.split(",")):
            size = mib << 20
            both = [rate(path, size, total, dsync) for dsync in (True, False)]
            print(
                f"{mib:3d} MiB per durable write: pwritev(RWF_DSYNC) {both[0]:5.0f} MB/s, "
                f"pwrite + fdatasync {both[1]:5.0f} MB/s"
            )


if __name__ == "__main__":
    main()
