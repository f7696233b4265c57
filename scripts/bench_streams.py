#!/usr/bin/env python3
"""Streams through the gRPC controller, beside the raw segment path, from one server run.

Starts ``segmentstore serve`` with its controller on ephemeral ports, then measures:

* stream/1, stream/8  the official Pravega Python client (PyPI ``pravega``, in a child
                      process) writing 100 B events with routing keys through its
                      pipelined writer (``max_inflight_events``) to a stream of 1 and of 8
                      segments; one flush at the end
* segment             the same official client writing the same 100 B pieces straight to
                      one segment: its byte-stream writer (no controller on the path, no
                      routing, no event framing); the baseline for the ratio
* sdk-segment         this project's SDK writing the same events to a plain segment with
                      its pipelined writer (the store's own ceiling for comparison)
* createStream        1,000 ``create_stream`` calls of the official client (1 segment
                      each), one at a time: p50 / p99 / max latency

Each rate is the best of ``--repeat`` interleaved rounds (default 3; the machine is shared).
Every figure names the fsync mode. Usage::

    .venv/bin/python scripts/bench_streams.py                     # fsync=always, 200k events
    .venv/bin/python scripts/bench_streams.py --events 50000 --fsync interval
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "client"))

import segmentstore_client as sc  # noqa: E402

READY = re.compile(r"listening on ([0-9.]+):(\d+).*controller on (tcp://[0-9.]+:\d+)")

# Runs in a child process: the official client's blocking calls hold the GIL.
CHILD = r"""
import json, sys, time
import pravega_client as pc
a = json.loads(sys.argv[1])
m = pc.StreamManager(a["uri"])
m.create_scope("bench")
if a["op"] == "bytes":
    m.create_stream("bench", a["stream"], 1)
    bs = m.create_byte_stream("bench", a["stream"])
    payload = b"x" * a["size"]
    bs.write(payload); bs.flush()
    t0 = time.perf_counter()
    for i in range(a["events"]):
        bs.write(payload)
    bs.flush()
    print(json.dumps({"seconds": time.perf_counter() - t0}), flush=True)
elif a["op"] == "write":
    m.create_stream("bench", a["stream"], a["segments"])
    w = m.create_writer("bench", a["stream"], max_inflight_events=a["inflight"])
    payload = "x" * a["size"]
    keys = [f"key-{i}" for i in range(64)]
    w.write_event(payload, routing_key=keys[0]); w.flush()  # connections set up
    t0 = time.perf_counter()
    for i in range(a["events"]):
        w.write_event(payload, routing_key=keys[i % 64])
    w.flush()
    print(json.dumps({"seconds": time.perf_counter() - t0}), flush=True)
else:
    lat = []
    for i in range(a["count"]):
        t0 = time.perf_counter()
        assert m.create_stream("bench", f"s{i}", 1)
        lat.append(time.perf_counter() - t0)
    print(json.dumps({"latencies": lat}), flush=True)
import os; os._exit(0)
"""


def child(args: dict[str, object]) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(args)], capture_output=True, text=True, timeout=900
    )
    if proc.returncode != 0:
        raise SystemExit(f"official client failed: {proc.stderr[-2000:]}")
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


async def segment_path(endpoint: str, name: str, events: int, size: int) -> float:
    payload = b"x" * size
    async with sc.connect(endpoint) as client:
        await client.create_segment(name)
        async with client.writer(name) as w:
            await w.start()
            await w.write(payload)
            await w.flush()
            t0 = time.perf_counter()
            for _ in range(events):
                await w.write(payload)
            await w.flush()
            return time.perf_counter() - t0


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--events", type=int, default=200_000)
    p.add_argument("--size", type=int, default=100)
    p.add_argument(
        "--inflight", type=int, default=1000, help="official writer's max_inflight_events"
    )
    p.add_argument("--streams", type=int, default=1000, help="createStream calls to time")
    p.add_argument("--repeat", type=int, default=3, help="rounds; the best rate of each is shown")
    p.add_argument("--fsync", default="always", choices=("always", "interval", "never"))
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as data:
        cmd = [
            sys.executable, "-m", "segmentstore", "serve", "--host", "127.0.0.1", "--port", "0",
            "--http-port", "-1", "--controller-port", "0", "--data-dir", data, "--fsync", a.fsync,
        ]  # fmt: skip
        server = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        try:
            assert server.stderr is not None
            m = None
            for _ in range(200):
                line = server.stderr.readline()
                if not line:
                    break
                m = READY.search(line)
                if m:
                    break
            if m is None:
                raise SystemExit("server did not start")
            # Keep reading the server's log so that it never blocks on a full pipe.
            threading.Thread(target=server.stderr.read, daemon=True).start()
            endpoint, uri = f"tcp://{m.group(1)}:{m.group(2)}", m.group(3)
            print(
                f"best of {a.repeat} rounds, fsync={a.fsync}, {a.events} events of {a.size} B, official writer max_inflight_events={a.inflight}"
            )
            rates: dict[str, float] = {}

            def best(name: str, rate: float) -> None:
                rates[name] = max(rates.get(name, 0.0), rate)

            for n in range(a.repeat):  # interleaved rounds; the best of each is kept
                for segs in (1, 8):
                    r = child({"op": "write", "uri": uri, "stream": f"w{segs}-{n}", "segments": segs,
                               "events": a.events, "size": a.size, "inflight": a.inflight})  # fmt: skip
                    best(f"stream/{segs}", a.events / float(r["seconds"]))  # type: ignore[arg-type]
                r = child({"op": "bytes", "uri": uri, "stream": f"raw-{n}", "events": a.events, "size": a.size})  # fmt: skip
                best("segment", a.events / float(r["seconds"]))  # type: ignore[arg-type]
                seconds = asyncio.run(segment_path(endpoint, f"raw-{n}", a.events, a.size))
                best("sdk-segment", a.events / seconds)
            for name, rate in rates.items():
                ratio = rate / rates["segment"]
                print(f"  {name:<11} {rate:>12,.0f} events/s   {ratio:6.1%} of the segment path")
            r = child({"op": "create", "uri": uri, "count": a.streams})
            lat = sorted(float(x) * 1000 for x in r["latencies"])  # type: ignore[attr-defined]
            p50, p99 = lat[len(lat) // 2], lat[int(len(lat) * 0.99) - 1]
            print(
                f"  createStream x{a.streams}: p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {lat[-1]:.2f} ms"
            )
        finally:
            server.terminate()
            server.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
