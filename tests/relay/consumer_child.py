"""A relay consumer process for the kill/restart test: it journals the key of every event
and, in the same write, the checkpoint after them, so what it consumed and where it
resumes can never disagree (the SDK's pluggable checkpoint store).

Usage: consumer_child.py URL SOURCE JOURNAL TARGET_EVENTS
"""

from __future__ import annotations

import asyncio
import os
import sys

from segmentstore_client.formats.databus import DatabusEvent
from segmentstore_client.relay import RelayConsumer

CP = b"#cp "


class JournalStore:
    def __init__(self, path: str) -> None:
        self.path = path
        self.pending: list[bytes] = []
        self.count = 0
        self.fd = -1

    async def load(self) -> str | None:
        data = b""
        if os.path.exists(self.path):
            with open(self.path, "rb") as f:
                data = f.read()
        cut = data.rfind(CP)
        checkpoint = None
        if cut >= 0:
            end = data.index(b"\n", cut) + 1
            checkpoint = data[cut + len(CP) : end - 1].decode()
            data = data[:end]
        else:
            data = b""
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT)
        os.ftruncate(self.fd, len(data))  # drop what followed the last checkpoint
        os.lseek(self.fd, len(data), os.SEEK_SET)
        self.count = sum(1 for line in data.splitlines() if not line.startswith(CP))
        return checkpoint

    async def save(self, checkpoint: str) -> None:
        record = b"".join(self.pending) + CP + checkpoint.encode() + b"\n"
        os.write(self.fd, record)
        self.count += len(self.pending)
        self.pending.clear()


async def main(url: str, source: str, journal: str, target: int) -> None:
    store = JournalStore(journal)

    def on_event(event: DatabusEvent) -> None:
        store.pending.append(b"%d\n" % int(event.key))  # type: ignore[arg-type]

    consumer = RelayConsumer(
        url, [source], checkpoint_store=store, on_event=on_event, size=64 * 1024, hold_ms=500
    )
    async with consumer:
        while store.count < target:
            await consumer.poll()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
