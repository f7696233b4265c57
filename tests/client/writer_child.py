"""A writer process for the crash test: writes events 1..COUNT with the given writer id
(numbered from 1, so a restarted process replays the same numbers) and prints how many
the server has acknowledged. The parent kills it with SIGKILL mid-stream."""

from __future__ import annotations

import asyncio
import sys

import segmentstore_client as sc


def payload(i: int) -> bytes:
    return b"%010d" % i + b"." * 90


async def main(endpoint: str, segment: str, writer_id: str, count: int) -> None:
    # A small byte bound keeps the writer mid-stream when it is killed: a few blocks
    # in flight, some of them already durable on the server, none acknowledged.
    async with (
        sc.connect(endpoint) as client,
        client.writer(
            segment,
            writer_id=writer_id,
            first_event_number=1,
            block_size=32 * 1024,
            max_buffered_bytes=128 * 1024,
        ) as w,
    ):
        chunk = 2000
        for start in range(1, count + 1, chunk):
            end = min(start + chunk, count + 1)
            ack = await w.write_many(
                (payload(i) for i in range(start, end)), first_event_number=start
            )
            ack.add_done_callback(lambda a, n=end - 1: print(f"acked {n}", flush=True))
    print("done", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
