"""A reader-group member in its own process, for the crash tests: joins GROUP over
STREAM and prints every event it reads (one line each, flushed), until killed.

Usage: python group_reader_child.py ENDPOINT CONTROLLER GROUP STREAM READER_ID
"""

from __future__ import annotations

import asyncio
import sys

import segmentstore_client as sc


async def main(endpoint: str, controller: str, group: str, stream: str, rid: str) -> None:
    async with sc.connect(endpoint, controller=controller) as c:
        g = await c.reader_group(group, [stream], reader_timeout=1.5, sync_interval=0.1)
        async for ev in g.reader(rid).events():
            print(ev.data.decode(), flush=True)
            await asyncio.sleep(0.002)  # a slow consumer: the kill lands mid-segment


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
