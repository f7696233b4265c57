"""A stream writer in its own process, for the crash tests: writes ``total`` events
``k<j % keys>:<j // keys>`` routed by key ``k<j % keys>``, in ``write_many`` calls of
``chunk``, with ``exactly_once=True`` and the writer id given; prints the number of events
queued after each call (the parent kills it mid-way with SIGKILL) and ``done`` at the end.

Usage: python stream_writer_child.py ENDPOINT CONTROLLER STREAM WRITER_ID TOTAL KEYS CHUNK
"""

from __future__ import annotations

import asyncio
import sys

import segmentstore_client as sc


async def main(endpoint: str, controller: str, stream: str, wid: str, total: int,
               keys: int, chunk: int) -> None:  # fmt: skip
    async with (
        sc.connect(endpoint, controller=controller) as c,
        c.stream_writer(stream, wid, exactly_once=True, linger=0.0005) as w,
    ):
        for start in range(0, total, chunk):
            js = range(start, min(total, start + chunk))
            await w.write_many(
                [f"k{j % keys}:{j // keys}".encode() for j in js],
                routing_keys=[f"k{j % keys}" for j in js],
            )
            print(js[-1] + 1, flush=True)
            await asyncio.sleep(0.01)  # paced: the kill (and a scale) land mid-way
    print("done", flush=True)


if __name__ == "__main__":
    a = sys.argv[1:]
    asyncio.run(main(a[0], a[1], a[2], a[3], int(a[4]), int(a[5]), int(a[6])))
