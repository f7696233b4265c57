"""A/B of the event loop's cost per append (issue 19): this checkout against another one
(e.g. main in ``git worktree add --detach /tmp/main-ab main``), interleaved.

Each round runs ``scripts/bench_latency.py`` of each checkout in turn (its own code via
PYTHONPATH, this venv), and while it runs reads, from ``/proc``, the CPU time of the
server's main thread (the event loop) and, from ``/metrics``, the appends stored, over a
window in the middle of the run: loop CPU microseconds per append is the figure the cuts
on the loop are meant to lower; the ack percentiles come from bench_latency's own output.

    .venv/bin/python scripts/bench_loop_ab.py --other /tmp/main-ab --rounds 3 \\
        --events 1000 --active 100

``--calls`` counts instead (a count, not a timing: the machine's load does not move it):
the Python function calls the event loop's thread makes per append, under cProfile, with
the server's real ``Connection`` and store driven in memory (``tests/server/harness.py``
of each checkout, fsync=never, plain asyncio): 100 writers on one connection, each read
carrying one AppendBlockEnd per writer, 20 reads. Then, without the profiler, the thread
CPU time of ``data_received`` (decode, dispatch, the store's append) per append over 200
more such reads, and per MiB of 30 frames of 16 x 64 KiB events fed in 256 KiB pieces.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TICK = os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    try:
        return [int(x) for x in path.read_text().split()]
    except OSError:
        return []


def loop_cpu(pid: int) -> float | None:
    """Seconds of CPU the process's main thread (the event loop) has used; None once the
    process is gone (a run shorter than --settle + --window)."""
    try:
        stat = Path(f"/proc/{pid}/task/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def listening_ports(pid: int) -> list[int]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            link = os.readlink(fd)
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    ports = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = line.split()
        if f[3] == "0A" and f[9] in inodes:  # LISTEN
            ports.append(int(f[1].split(":")[1], 16))
    return ports


def appends(port: int) -> float | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return None
    m = re.search(r"^segmentstore_appends_total (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def one_run(tree: Path, args: argparse.Namespace) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=f"{tree}:{tree / 'client'}")
    cmd = [sys.executable, str(tree / "scripts" / "bench_latency.py")]
    cmd += ["--events", str(args.events), "--active", str(args.active)]
    if args.active > 1:
        cmd += ["--background", args.background]
    bench = subprocess.Popen(cmd, env=env, cwd=tree, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    server = port = None
    while time.monotonic() < deadline and port is None:
        time.sleep(0.2)
        kids = children(bench.pid)
        server = kids[0] if kids else None
        if server is not None:
            port = next((p for p in listening_ports(server) if appends(p) is not None), None)
    out: dict[str, float] = {}
    if server is not None and port is not None:
        time.sleep(args.settle)
        c0, a0 = loop_cpu(server), appends(port)
        time.sleep(args.window)
        c1, a1 = loop_cpu(server), appends(port)
        if c0 is not None and c1 is not None and a0 is not None and a1 is not None and a1 > a0:
            out["loop_us_per_append"] = (c1 - c0) / (a1 - a0) * 1e6
            out["appends_per_s"] = (a1 - a0) / args.window
    text, _ = bench.communicate(timeout=600)
    for what, key in (("SDK write() -> ack", "ack"), ("server append -> ack", "server")):
        line = next((x for x in text.splitlines() if x.startswith(what)), "")
        for stat in ("p50", "p99", "mean"):
            m = re.search(stat + r" (?:<= )?\s*(\d+) us", line)
            if m:
                out[f"{key}_{stat}_us"] = float(m.group(1))
    return out


async def count_calls(tree: Path) -> tuple[float, float, float]:
    """Python calls on the loop per append, then (no profiler) the loop thread's CPU in
    ``data_received`` per small append and per MiB of 1 MiB blocks of 64 KiB events (run
    inside a child with ``tree`` on the path)."""
    import cProfile
    import pstats
    import tempfile
    import uuid

    sys.path.insert(0, str(tree))
    from segmentstore_client.protocol import (
        CreateSegment,
        SetupAppend,
        block_end,
        encode,
        frame_event,
    )

    from tests.server.harness import harness

    with tempfile.TemporaryDirectory(prefix="bench-loop-calls-") as d:
        async with harness(Path(d)) as h:
            peer = h.connect()
            writers = [uuid.uuid4() for _ in range(101)]
            peer.send(*(CreateSegment(i, f"s{i}", 0, 0) for i in range(101)))
            await peer.until(lambda: len(peer.received) >= 102, "created")
            peer.send(*(SetupAppend(1000 + i, w, f"s{i}") for i, w in enumerate(writers)))
            await peer.until(lambda: len(peer.received) >= 203, "set up")
            big_writer = writers.pop()
            event = frame_event(b"x" * 100)
            reads = [
                b"".join(encode(block_end(w, event, 1, k, k)) for w in writers)
                for k in range(1, 221)
            ]

            async def feed(reads: list[bytes], replies: int) -> float:
                cpu = 0.0
                for read in reads:
                    want = len(peer.received) + replies
                    t = time.thread_time()
                    peer.send_raw(read)
                    cpu += time.thread_time() - t
                    await peer.until(lambda want=want: len(peer.received) >= want, "acks")
                return cpu

            prof = cProfile.Profile()
            prof.enable()
            await feed(reads[:20], 100)
            prof.disable()
            small = await feed(reads[20:], 100) / (100 * len(reads[20:]))
            records = b"".join(frame_event(bytes([n]) * 65536) for n in range(16))
            cpu = 0.0
            for k in range(1, 31):
                frame = encode(block_end(big_writer, records, 16, 16 * k, k))
                pieces = [frame[i : i + 256 * 1024] for i in range(0, len(frame), 256 * 1024)]
                cpu += await feed(pieces[:-1], 0) + await feed(pieces[-1:], 1)
            per_mib = cpu / (30 * len(records) / 2**20)
    calls = sum(v[1] for v in pstats.Stats(prof).stats.values())  # type: ignore[attr-defined]
    return calls / (100 * 20), small, per_mib


def compare_calls(trees: dict[str, Path]) -> None:
    for name, tree in trees.items():
        env = dict(os.environ, PYTHONPATH=f"{tree}:{tree / 'client'}")
        cmd = [sys.executable, str(Path(__file__).resolve()), "--count-calls-in", str(tree)]
        out = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True, check=True)
        calls, small, big = (float(x) for x in out.stdout.split())
        print(
            f"{name:<5} {calls:6.1f} Python calls on the loop per append, data_received "
            f"{small * 1e6:5.2f} us CPU per 100 B append, {big * 1e3:5.3f} ms per MiB of "
            "1 MiB blocks of 64 KiB events"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--other", type=Path, help="the checkout to compare with")
    p.add_argument("--calls", action="store_true", help="count calls per append (see above)")
    p.add_argument("--count-calls-in", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--events", type=int, default=1000)
    p.add_argument("--active", type=int, default=100)
    p.add_argument("--background", choices=("client", "process"), default="client")
    p.add_argument("--settle", type=float, default=3.0, help="seconds before the window")
    p.add_argument("--window", type=float, default=5.0, help="seconds of CPU measured")
    args = p.parse_args()
    if args.count_calls_in is not None:
        print(*asyncio.run(count_calls(args.count_calls_in)))
        return
    if args.other is None:
        p.error("--other is required")
    trees = {"this": ROOT, "other": args.other.resolve()}
    if args.calls:
        compare_calls(trees)
        return
    results: dict[str, list[dict[str, float]]] = {k: [] for k in trees}
    for r in range(args.rounds):
        for name, tree in trees.items():
            got = one_run(tree, args)
            results[name].append(got)
            load = os.getloadavg()[0]
            shown = "  ".join(f"{k} {v:.1f}" for k, v in got.items())
            print(f"round {r + 1} {name:<5} load {load:4.1f}  {shown}", flush=True)
    print(f"\nmedians over {args.rounds} rounds (fsync=always, --active {args.active}):")
    keys = sorted({k for runs in results.values() for run in runs for k in run})
    for key in keys:
        row = []
        for name in trees:
            xs = [run[key] for run in results[name] if key in run]
            row.append(f"{name} {statistics.median(xs):8.1f}" if xs else f"{name} n/a")
        print(f"  {key:<20} " + "   ".join(row))


if __name__ == "__main__":
    main()
