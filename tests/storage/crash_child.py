"""Child process for the kill -9 tests: appends forever, recording every acknowledgement.

Usage: crash_child.py DATA_DIR ACK_FILE SEED [big]. Opens the store (recovering it), continues
each segment's writer at the event number after the durable one, and keeps 32 appends per
segment in flight; meanwhile it merges small transactions (three ``TX`` events each) into
segment 0. Every acknowledged append is written to ACK_FILE with one os.write (so it is in the
kernel before the parent can kill us) as ``A <segment> <event> <new length>``, every
acknowledged truncation as ``T <segment> <offset>``, every acknowledged merge as ``M <txn id>``.
Prints ``ready`` once open.

With ``big``, events of segments 1 and 2 (and every 8th of 0 and 3) carry 33-48 KiB payloads:
chunk files then get big, unaligned direct-I/O writes while the child is killed.
"""

from __future__ import annotations

import asyncio
import os
import random
import struct
import sys
import uuid
import zlib
from pathlib import Path

from segmentstore.storage import NULL_ATTRIBUTE_VALUE, AppendResult, SegmentStore, StoreConfig

SEGMENTS = [f"crash/stream/{i}.#epoch.0" for i in range(4)]
EVENT_HEAD = struct.Struct("<2sBqI")  # magic, segment index, event number, payload length
EVENT_CRC = struct.Struct("<I")


def writer_of(index: int) -> uuid.UUID:
    return uuid.UUID(int=0x1000 + index)


def config(data_dir: Path) -> StoreConfig:
    # Tiny files: log rolls, chunk flushes and checkpoints all happen while we get killed.
    return StoreConfig(
        data_dir,
        container_count=2,
        log_file_bytes=64 * 1024,
        chunk_file_bytes=32 * 1024,
        checkpoint_log_bytes=256 * 1024,
        flush_bytes=64 * 1024,
        flush_interval_s=0.05,
        read_cache_bytes=256 * 1024,
    )


def make_event(
    index: int, number: int, rng: random.Random, magic: bytes = b"EV", big: bool = False
) -> bytes:
    if big and (index in (1, 2) or number % 8 == 7):
        payload = rng.randbytes(rng.randint(33 * 1024, 48 * 1024))
    else:
        payload = rng.randbytes(rng.randint(0, 300))
    head = EVENT_HEAD.pack(magic, index, number, len(payload))
    return head + payload + EVENT_CRC.pack(zlib.crc32(head + payload))


def txn_name(txn: int) -> str:
    return f"{SEGMENTS[0]}#transaction.{txn:032x}"


async def main() -> None:
    data_dir, ack_path, seed = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    big = sys.argv[4:] == ["big"]
    rng = random.Random(seed)
    store = await SegmentStore.open(config(data_dir))
    acks = os.open(ack_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    for name in SEGMENTS:
        if not store.exists(name):
            await store.create_segment(name)
    print("ready", flush=True)

    async def feed(index: int) -> None:
        name = SEGMENTS[index]
        writer = writer_of(index)
        last = store.get_attribute(name, writer)
        number = 0 if last == NULL_ATTRIBUTE_VALUE else last + 1
        rounds = 0
        while True:
            futs = []
            for _ in range(32):
                fut = store.append(
                    name,
                    make_event(index, number, rng, big=big),
                    writer_id=writer,
                    event_number=number,
                )

                def record(f: asyncio.Future[AppendResult], n: int = number) -> None:
                    if not f.cancelled() and f.exception() is None:
                        os.write(acks, f"A {index} {n} {f.result().new_length}\n".encode())

                fut.add_done_callback(record)
                futs.append(fut)
                number += 1
            results = await asyncio.gather(*futs)
            rounds += 1
            if index == 3 and rounds % 20 == 0:
                offset = results[10].new_length
                await store.truncate(name, offset)
                os.write(acks, f"T {index} {offset}\n".encode())

    async def merge_transactions() -> None:
        # Transaction ids: unique across rounds (the seed is the round number).
        txn = seed * 1_000_000
        while True:
            txn += 1
            name = txn_name(txn)
            await store.create_segment(name)
            await asyncio.gather(
                *(store.append(name, make_event(j, txn, rng, b"TX")) for j in range(3))
            )
            await store.merge(SEGMENTS[0], name)
            os.write(acks, f"M {txn}\n".encode())

    await asyncio.gather(merge_transactions(), *(feed(i) for i in range(len(SEGMENTS))))


if __name__ == "__main__":
    asyncio.run(main())
