"""A handler process for the request/reply tests and benchmark:
``python eventbus_handler.py ENDPOINT SCOPE PARTITION``. It answers ``echo`` (no
namespace) with the request's payload and ``whoami`` in namespace ``proc`` with its pid,
prints ``ready`` once it reads its request segment, and stops on SIGTERM or stdin EOF."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import segmentstore_client as sc


async def main(endpoint: str, scope: str, partition: int) -> None:
    async with sc.connect(endpoint) as client:
        bus = client.events(scope)
        bus.on("echo", lambda ev: ev.data)
        bus.on("whoami", lambda ev: str(os.getpid()), namespace="proc")
        seg = bus.request_segment(partition)
        await client.create_segment(seg, exist_ok=True)
        end = (await client.segment_info(seg)).length
        serving = asyncio.create_task(bus.serve(partition, offset=end))
        print("ready", flush=True)
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        loop.add_reader(sys.stdin, lambda: stop.set() if not sys.stdin.read(1) else None)
        await stop.wait()
        await bus.close()
        await asyncio.gather(serving, return_exceptions=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
