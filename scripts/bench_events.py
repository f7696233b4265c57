#!/usr/bin/env python3
"""Request/reply (``client.events``) over streams or segments: latency and rate.

Starts a server with its controller (or uses ``--endpoint HOST:PORT|CONTROLLER_URI``)
and ``--handlers`` handler processes that answer ``echo`` with the request's payload:
over streams (the default) they are readers of one reader group on a request stream of
``--partitions`` segments (default twice the handlers) and take a request's next only
once its reply is stored; over segments (``--over segments``) each serves one request
segment. Then
``--emitters`` emitter tasks in this process send ``--requests`` requests in all, each
waiting for its reply, and every reply is checked against its request (the payload is
unique per request; the bus matched it by ref id). ``--ignored`` events with unknown
names and namespaces are sent too; the handlers must report exactly that many ignored.
Prints p50 / p99 / max latency and the request rate, naming the server's fsync mode::

    .venv/bin/python scripts/bench_events.py                      # fsync=always, 10,000 requests
    .venv/bin/python scripts/bench_events.py --over segments
    .venv/bin/python scripts/bench_events.py --fsync interval --requests 20000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "client"))
sys.path.insert(0, str(ROOT / "scripts"))

import segmentstore_client as sc  # noqa: E402
from bench_client import server  # noqa: E402
from segmentstore_client.eventbus import EventBus  # noqa: E402
from segmentstore_client.formats.events import Event  # noqa: E402


def connect(endpoint: str) -> sc.Client:
    """``HOST:PORT`` or ``HOST:PORT|CONTROLLER_URI`` (what ``bench_client.server`` yields)."""
    seg, _, ctl = endpoint.partition("|")
    return sc.connect(seg, controller=ctl) if ctl else sc.connect(seg)


def bus_of(client: sc.Client, scope: str, over: str, partitions: int) -> EventBus:
    return client.events(
        scope, partitions=partitions, over="streams" if over == "streams" else "segments"
    )


async def handler_main(endpoint: str, scope: str, over: str, partitions: int, where: int) -> None:
    async with connect(endpoint) as client:
        bus = bus_of(client, scope, over, partitions)
        bus.on("echo", lambda ev: ev.data, namespace="bench")
        if over == "streams":
            await bus.start()
            await bus.reader_group().reader(f"handler-{where}").join()
            serving = asyncio.create_task(bus.serve(reader_id=f"handler-{where}"))
        else:
            seg = bus.request_segment(where)
            await client.create_segment(seg, exist_ok=True)
            end = (await client.segment_info(seg)).length
            serving = asyncio.create_task(bus.serve(where, offset=end))
        print("ready", flush=True)
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        loop.add_reader(sys.stdin, lambda: stop.set() if not sys.stdin.read(1) else None)
        await stop.wait()
        print(f"handled {bus.handled} ignored {bus.ignored}", flush=True)
        await bus.close()
        await asyncio.gather(serving, return_exceptions=True)


def start_handlers(
    endpoint: str, scope: str, over: str, partitions: int, n: int
) -> list[subprocess.Popen[str]]:
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--handler", endpoint, scope, over, str(partitions), str(p)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for p in range(n)
    ]
    for proc in procs:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError("a handler process did not start")
    return procs


def stop_handlers(procs: list[subprocess.Popen[str]]) -> tuple[int, int]:
    handled = ignored = 0
    for proc in procs:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.close()
    for proc in procs:
        out = proc.stdout.read()
        proc.wait(timeout=60)
        words = out.split()
        handled += int(words[words.index("handled") + 1])
        ignored += int(words[words.index("ignored") + 1])
    return handled, ignored


async def emit_all(
    endpoint: str, scope: str, args: argparse.Namespace
) -> tuple[list[float], float, int]:
    requests, emitters, ignored = args.requests, args.emitters, args.ignored
    async with (
        connect(endpoint) as client,
        bus_of(client, scope, args.over, args.partitions) as bus,
    ):
        for i in range(50):  # warm-up: connections, writers, readers
            await bus.emit("echo", b"warm-%d" % i, namespace="bench", timeout=30)
        latencies: list[float] = []

        async def emitter(k: int, n: int) -> None:
            for i in range(n):
                payload = b"%d:%d:" % (k, i) + b"x" * 80
                t0 = time.perf_counter()
                reply = await bus.emit("echo", payload, namespace="bench", timeout=30)
                latencies.append(time.perf_counter() - t0)
                if not isinstance(reply, Event) or reply.data != payload:
                    raise AssertionError(f"reply {reply!r} does not match request {payload!r}")

        per = [
            requests // emitters + (1 if k < requests % emitters else 0) for k in range(emitters)
        ]
        t0 = time.perf_counter()
        await asyncio.gather(*(emitter(k, n) for k, n in enumerate(per)))
        elapsed = time.perf_counter() - t0
        for i in range(ignored):  # unknown name, then unknown namespace, in turn
            name, ns = ("nobody", "bench") if i % 2 else ("echo", "elsewhere")
            await bus.emit(name, b"", namespace=ns, wait_reply=False)
        await asyncio.sleep(1.0)  # let the handlers read them before they report
        return latencies, elapsed, bus.late_replies


def run(endpoint: str, fsync: str, args: argparse.Namespace) -> None:
    scope = f"benchevents{uuid.uuid4().hex[:8]}"
    procs = start_handlers(endpoint, scope, args.over, args.partitions, args.handlers)
    try:
        lat, elapsed, late = asyncio.run(emit_all(endpoint, scope, args))
    finally:
        handled, ignored = stop_handlers(procs)
    lat.sort()
    ms = [x * 1000 for x in lat]
    print(
        f"fsync={fsync}, over {args.over} ({args.partitions} request partitions): "
        f"{len(lat)} requests from {args.emitters} emitter tasks to "
        f"{args.handlers} handler processes in {elapsed:.2f} s = {len(lat) / elapsed:,.0f} req/s; "
        f"latency p50 {statistics.median(ms):.2f} ms, p99 {ms[int(len(ms) * 0.99) - 1]:.2f} ms, "
        f"max {ms[-1]:.2f} ms; every reply matched its request ({late} late replies dropped); "
        f"handlers handled {handled}, ignored {ignored} of {args.ignored} unknown"
    )
    if ignored != args.ignored:
        raise SystemExit(f"expected {args.ignored} ignored events, the handlers saw {ignored}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--handler":
        a = sys.argv[2:]
        asyncio.run(handler_main(a[0], a[1], a[2], int(a[3]), int(a[4])))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--fsync", default="always", help="fsync mode of the server started here")
    ap.add_argument("--endpoint", help="use this server instead (give --fsync as its label)")
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--emitters", type=int, default=4)
    ap.add_argument("--handlers", type=int, default=2)
    ap.add_argument("--over", choices=["streams", "segments"], default="streams")
    ap.add_argument(
        "--partitions", type=int, help="request partitions (default: 2 per handler over streams)"
    )
    ap.add_argument("--ignored", type=int, default=200)
    args = ap.parse_args()
    if args.partitions is None:
        args.partitions = args.handlers * (2 if args.over == "streams" else 1)
    elif args.over == "segments" and args.partitions != args.handlers:
        raise SystemExit(
            "over segments, one handler serves each partition: --partitions = --handlers"
        )
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs", flush=True)
    if args.endpoint:
        run(args.endpoint, args.fsync, args)
        return
    with server(args.fsync, controller=args.over == "streams") as (endpoint, _pid):
        run(endpoint, args.fsync, args)


if __name__ == "__main__":
    main()
