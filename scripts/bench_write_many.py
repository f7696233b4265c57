#!/usr/bin/env python3
"""Before/after for the client's ``write_many``: the working tree's SDK, the SDK of a
baseline git revision and the raw protocol, interleaved in one run against one server.

Each rep runs every variant once (the order rotates), each in its own process on a fresh
segment, after the server has gone quiet; a variant writes ``--count`` events of
``--size`` bytes with ``write_many`` (async, or the blocking facade with ``--sync``) and
reports wall time to the last ack and the process's CPU time. The raw writer is
``bench_client.raw_write`` (pre-framed blocks, not timed framing). Usage::

    .venv/bin/python scripts/bench_write_many.py --baseline HEAD --reps 7
    .venv/bin/python scripts/bench_write_many.py --baseline HEAD~3 --sync --fsync interval
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child(args: argparse.Namespace) -> None:
    """One timed write in this process, with the SDK found first on ``--client-dir``."""
    sys.path.insert(0, args.client_dir)
    import segmentstore_client  # the variant under test, before bench_client imports it

    assert segmentstore_client.__file__ is not None
    assert segmentstore_client.__file__.startswith(args.client_dir), segmentstore_client.__file__
    sys.path.insert(1, str(ROOT / "scripts"))
    import bench_client as bc

    payloads = bc.make_payloads(args.size, args.count)
    segment = bc.new_segment(args.endpoint)
    cpu = time.process_time()
    if args.child == "raw":
        secs = bc.run_async(partial(bc.raw_write, args.endpoint, segment, payloads))
    elif args.child == "sync":
        secs = bc.sync_write(args.endpoint, segment, payloads, True)
    else:
        secs = bc.run_async(partial(bc.sdk_write, args.endpoint, segment, payloads, True, None))
    print(secs, time.process_time() - cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--baseline", default="HEAD", help="git revision of the 'before' client")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--count", type=int, default=500_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--sync", action="store_true", help="the blocking facade's write_many")
    ap.add_argument("--fsync", default="always")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--endpoint", help=argparse.SUPPRESS)
    ap.add_argument("--client-dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    sys.path.insert(0, str(ROOT / "scripts"))
    import bench_client as bc

    mode = "sync" if args.sync else "many"
    with tempfile.TemporaryDirectory(prefix="bench-baseline-") as base:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", args.baseline, "client"],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", base], input=archive, check=True)
        variants = {
            "raw protocol": ("raw", str(ROOT / "client")),
            f"before ({args.baseline})": (mode, str(Path(base) / "client")),
            "after (working tree)": (mode, str(ROOT / "client")),
        }
        secs: dict[str, list[float]] = {name: [] for name in variants}
        cpus: dict[str, list[float]] = {name: [] for name in variants}
        names = list(variants)
        with bc.server(args.fsync) as (endpoint, pid):
            for rep in range(args.reps):
                for name in names[rep % 3 :] + names[: rep % 3]:
                    what, client_dir = variants[name]
                    bc.settle(pid, 1.0)
                    out = subprocess.run(
                        [
                            sys.executable, __file__, "--child", what, "--endpoint", endpoint,
                            "--client-dir", client_dir, "--count", str(args.count),
                            "--size", str(args.size),
                        ],
                        check=True, capture_output=True, text=True,
                    )  # fmt: skip
                    wall, cpu = out.stdout.split()[-2:]
                    secs[name].append(float(wall))
                    cpus[name].append(float(cpu))
    n = args.count
    raw_best = n / min(secs["raw protocol"])
    print(
        f"{'sync ' if args.sync else ''}write_many of {n:,} x {args.size} B, fsync={args.fsync}, "
        f"{args.reps} reps interleaved, cpus={os.cpu_count()}, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    for name, runs in secs.items():
        best, median = n / min(runs), n / statistics.median(runs)
        cpu_ns = 1e9 * statistics.median(cpus[name]) / n
        print(
            f"{name:<22} best {best:>11,.0f} ev/s ({100 * best / raw_best:3.0f}% of raw)  "
            f"median {median:>11,.0f} ev/s  process CPU {cpu_ns:4.0f} ns/event"
        )


if __name__ == "__main__":
    main()
