"""A handler process for the request/reply tests and benchmark.

``python eventbus_handler.py ENDPOINT SCOPE PARTITION`` serves a request segment;
``python eventbus_handler.py ENDPOINT SCOPE READER_ID --controller URI`` serves the
request stream as ``READER_ID`` of the handlers' reader group (``--read-size`` and
``--delay`` seconds of work per ``echo``). It answers ``echo`` (no namespace) with the
request's payload and ``whoami`` in namespace ``proc`` with its pid, prints ``ready``
once it serves and ``got <id>`` for each ``echo`` it starts when ``--trace`` is given,
and stops on SIGTERM or stdin EOF (printing ``handled N ignored M``)."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from typing import Any

import segmentstore_client as sc
from segmentstore_client.formats.events import Event


async def main(args: argparse.Namespace) -> None:
    streams = args.controller is not None
    conn: dict[str, Any] = {"controller": args.controller} if streams else {}
    async with sc.connect(args.endpoint, **conn) as client:
        options: dict[str, Any] = (
            {"over": "streams", "read_size": args.read_size} if streams else {}
        )
        bus = client.events(args.scope, **options)

        async def echo(ev: Event) -> bytes:
            if args.trace:
                print(f"got {ev.id}", flush=True)
            if args.delay:
                await asyncio.sleep(args.delay)
            return ev.data

        bus.on("echo", echo)
        bus.on("whoami", lambda ev: str(os.getpid()), namespace="proc")
        if streams:  # a member of the group before "ready": the emitter's requests are shared
            await bus.start()
            await bus.reader_group().reader(args.where).join()
            serving = asyncio.create_task(bus.serve(reader_id=args.where))
        else:
            seg = bus.request_segment(int(args.where))
            await client.create_segment(seg, exist_ok=True)
            end = (await client.segment_info(seg)).length
            serving = asyncio.create_task(bus.serve(int(args.where), offset=end))
        await asyncio.sleep(0)
        print("ready", flush=True)
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        loop.add_reader(sys.stdin, lambda: stop.set() if not sys.stdin.read(1) else None)
        await asyncio.wait(
            [asyncio.ensure_future(stop.wait()), serving], return_when="FIRST_COMPLETED"
        )
        print(f"handled {bus.handled} ignored {bus.ignored}", flush=True)
        await bus.close()
        await asyncio.gather(serving, return_exceptions=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("endpoint")
    ap.add_argument("scope")
    ap.add_argument("where", help="partition (segments) or reader id (streams)")
    ap.add_argument("--controller")
    ap.add_argument("--read-size", type=int, default=1024 * 1024)
    ap.add_argument("--delay", type=float, default=0.0)
    ap.add_argument("--trace", action="store_true")
    asyncio.run(main(ap.parse_args()))
