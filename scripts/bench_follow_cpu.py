#!/usr/bin/env python3
"""What a tailing reader costs the server, per event (issue 19): the server's CPU by
thread, the writer's ack latency, and the follower's own publish -> consume latency.

Starts ``segmentstore serve`` (fsync=always unless told otherwise) and runs ``--pairs``
pairs of rounds, each of ``--events`` lone events of ``--size`` bytes appended one at a
time over a bare socket (``bench_lone_rtt.raw_round``) to a fresh segment: a round alone,
then a round with a tailing reader (the SDK's ``reader(follow=True)``) in another process.
Per round it prints the ack p50 / p99, the server's CPU per event from /proc (``loop``:
the event-loop thread; ``other``: its other threads, the log thread mostly), and with
the follower its publish -> consume p50 / p99 (the raw writer's send to the reader's
event, on the same monotonic clock). /proc counts CPU in clock ticks (10 ms): use a few
thousand events. Figures move by tens of percent between runs on a shared machine:
compare trees by alternating them (``PYTHONPATH=<tree>:<tree>/client``).

    .venv/bin/python scripts/bench_follow_cpu.py --events 3000 --pairs 2
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "client"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import segmentstore_client as sc  # noqa: E402
from bench_lone_rtt import TIMEOUT, create, percentiles, raw_round  # noqa: E402

from segmentstore.server.launcher import ServerProcess  # noqa: E402

_TICK = os.sysconf("SC_CLK_TCK")


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of ``pid``'s main thread (``loop``) and of all its others (``other``:
    the log thread, mostly)."""
    out = {"loop": 0.0, "other": 0.0}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        out["loop" if int(tid) == pid else "other"] += (int(fields[11]) + int(fields[12])) / _TICK
    return out


async def _follow(endpoint: str, segment: str, events: int, ready: Any, pipe: Connection) -> None:
    seen: list[float] = []
    clock = time.perf_counter
    async with sc.connect(endpoint) as client:
        reader = client.reader(segment, follow=True)
        ready.set()
        async for _event in reader:
            seen.append(clock())
            if len(seen) == events:
                break
        await reader.close()
    pipe.send(seen)


def follow_main(endpoint: str, segment: str, events: int, ready: Any, pipe: Connection) -> None:
    asyncio.run(_follow(endpoint, segment, events, ready, pipe))


def run_round(server: ServerProcess, segment: str, a: argparse.Namespace, follow: bool) -> str:
    ctx = mp.get_context("spawn")
    proc = None
    if follow:
        ready = ctx.Event()
        mine, theirs = ctx.Pipe()
        proc = ctx.Process(
            target=follow_main, args=(server.endpoint, segment, a.events, ready, theirs)
        )
        proc.start()
        if not ready.wait(TIMEOUT):
            raise RuntimeError("the follower did not start")
        time.sleep(0.2)  # its first read parked at the tail
    sent: list[float] = []
    before = thread_cpu(server.pid)
    acks = raw_round(server.port, segment, a.events, a.size, sent)
    after = thread_cpu(server.pid)
    cpu = {k: (after[k] - before.get(k, 0.0)) / a.events * 1e6 for k in after}
    shown = ", ".join(f"{k} {v:3.0f}" for k, v in cpu.items())
    p50, p99 = percentiles(acks)
    line = f"ack p50 {p50:4.0f} p99 {p99:5.0f} us | server CPU us/event: {shown}"
    if proc is not None:
        if not mine.poll(TIMEOUT):
            raise RuntimeError("the follower did not see every event")
        seen = mine.recv()
        proc.join(TIMEOUT)
        f50, f99 = percentiles([r - s for s, r in zip(sent, seen, strict=True)])
        line += f" | follower p50 {f50:4.0f} p99 {f99:5.0f} us"
    return line


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--events", type=int, default=3000, help="lone events per round")
    p.add_argument("--pairs", type=int, default=2, help="pairs of rounds (alone, followed)")
    p.add_argument("--size", type=int, default=100, help="event size in bytes")
    p.add_argument("--fsync", default="always", choices=("always", "interval", "never"))
    a = p.parse_args()
    if a.events < 1 or a.pairs < 1 or a.size < 0:
        p.error("--events and --pairs must be >= 1 and --size >= 0")
    with tempfile.TemporaryDirectory() as tmp:
        server = ServerProcess(Path(tmp), ["--fsync", a.fsync], http_port=-1)
        server.start()
        try:
            names = [f"follow/{i}/0" for i in range(2 * a.pairs)]
            asyncio.run(create(server.endpoint, names))
            print(f"fsync={a.fsync}, {a.events} lone events of {a.size} B per round")
            for i, name in enumerate(names):
                follow = i % 2 == 1
                print(
                    f"{'followed' if follow else 'alone   '}: {run_round(server, name, a, follow)}"
                )
        finally:
            server.stop()


if __name__ == "__main__":
    main()
