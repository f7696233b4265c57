"""kill -9 under load, many times: nothing acknowledged is ever lost or duplicated.

Writers append pipelined blocks with known event numbers while the server is SIGKILLed at
a random moment. After each restart every writer reconnects, SetupAppend tells it the last
event number the server holds for it (which must cover everything that was acknowledged),
and it resends the rest with the same numbers. At the end each writer's events are in the
segments exactly once and in order, and everything ever acknowledged is there.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from segmentstore_client.protocol import block_end, frame_events

from .wire import (
    ConnectionClosed,
    WireClient,
    check_per_writer_order,
    event_payload,
    next_id,
    parse_events,
    unique,
)

if TYPE_CHECKING:
    from conftest import ServerProcess  # tests/conftest.py

ROUNDS = 12
WRITERS = 4
IN_FLIGHT = 16  # blocks per writer awaiting their ack
TIME_BUDGET_S = 75.0


@dataclass
class Writer:
    index: int
    segment: str
    writer_id: uuid.UUID = field(default_factory=uuid.uuid4)
    next_number: int = 1  # next event number to send
    acked: int = 0  # highest event number ever acknowledged
    unacked_at_kill: int = 0  # events sent but not acknowledged when the server died
    durable_unacked: int = 0  # of those, how many the server had stored anyway
    rng: random.Random = field(default_factory=random.Random)

    async def run_until_killed(
        self, host: str, port: int, stop: asyncio.Event, drain: bool = False
    ) -> None:
        try:
            c = await WireClient.connect(host, port, timeout=5)
        except (OSError, TimeoutError, ConnectionClosed):
            return
        try:
            last = await c.setup_append(self.writer_id, self.segment)
            last = max(last, 0)
            self.durable_unacked += max(0, min(last, self.next_number - 1) - self.acked)
            # Durability: everything acknowledged before the crash is still there.
            assert last >= self.acked, f"writer {self.index}: acked {self.acked}, server has {last}"
            self.acked = last
            self.next_number = last + 1  # resend the rest with the same numbers
            sent_blocks: list[int] = []  # last event number of each block sent
            while not stop.is_set() and not c.is_closed:
                while len(sent_blocks) - len(c.acks(self.writer_id)) < IN_FLIGHT:
                    k = self.rng.randint(1, 25)
                    n = self.next_number
                    size = self.rng.choice((40, 100, 900, 5000))
                    records = frame_events(
                        event_payload(self.index, m, size) for m in range(n, n + k)
                    )
                    c.send(block_end(self.writer_id, records, k, n + k - 1, next_id()))
                    sent_blocks.append(n + k - 1)
                    self.next_number = n + k
                with contextlib.suppress(TimeoutError):
                    await c.wait_until(
                        lambda: len(sent_blocks) - len(c.acks(self.writer_id)) < IN_FLIGHT,
                        timeout=0.2,
                    )
                acks = c.acks(self.writer_id)
                if acks:
                    assert [a.event_number for a in acks] == sent_blocks[: len(acks)]
                    self.acked = max(self.acked, acks[-1].event_number)
            if drain and sent_blocks:
                # A clean finish: wait for the acks of everything sent.
                await c.wait_acked(self.writer_id, sent_blocks[-1], timeout=20)
        except (ConnectionClosed, ConnectionError, OSError, TimeoutError):
            pass
        finally:
            acks = c.acks(self.writer_id)
            if acks:
                self.acked = max(self.acked, acks[-1].event_number)
            self.unacked_at_kill += self.next_number - 1 - self.acked
            await c.close()


async def test_kill_9_under_load_loses_and_duplicates_nothing(server: ServerProcess) -> None:
    rng = random.Random(20240607)
    segments = [unique("crash"), unique("crash")]
    async with await WireClient.connect(server.host, server.port) as admin:
        for s in segments:
            await admin.create_segment(s)
    writers = [Writer(i, segments[i % 2], rng=random.Random(i)) for i in range(WRITERS)]
    started = time.monotonic()
    rounds = 0
    total_acked_before_kill = 0
    while rounds < ROUNDS and time.monotonic() - started < TIME_BUDGET_S:
        stop = asyncio.Event()
        tasks = [
            asyncio.create_task(w.run_until_killed(server.host, server.port, stop)) for w in writers
        ]
        await asyncio.sleep(rng.uniform(0.05, 0.6))
        server.kill()  # SIGKILL, mid-stream
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
        total_acked_before_kill += sum(w.acked for w in writers)
        rounds += 1
        server.start()
    assert rounds >= 10, f"only {rounds} rounds in {TIME_BUDGET_S}s"
    unacked_before = {w.index: w.unacked_at_kill for w in writers}
    # Final pass: every writer reconnects once more (which checks acked <= durable) and
    # fills in whatever was lost in flight.
    stop = asyncio.Event()
    tasks = [
        asyncio.create_task(w.run_until_killed(server.host, server.port, stop, drain=True))
        for w in writers
    ]
    await asyncio.sleep(0.3)
    stop.set()
    await asyncio.wait_for(asyncio.gather(*tasks), 30)
    assert all(w.unacked_at_kill == unacked_before[w.index] for w in writers)
    assert all(w.acked > 0 for w in writers)
    assert total_acked_before_kill > 0
    # The kills really hit appends in flight.
    assert sum(w.unacked_at_kill for w in writers) > 0
    print(
        f"{rounds} rounds, {sum(w.acked for w in writers)} events acked, "
        f"{sum(w.unacked_at_kill for w in writers)} in flight at kills, "
        f"{sum(w.durable_unacked for w in writers)} of them durable anyway"
    )
    async with await WireClient.connect(server.host, server.port) as c:
        for s in segments:
            events = parse_events(await c.read_all(s))
            mine = [w for w in writers if w.segment == s]
            # Exactly once and in order: events 1..n for each writer, where n >= acked.
            seen: dict[int, int] = {}
            for payload in events:
                w_index = int(payload.split(b":", 1)[0][1:])
                seen[w_index] = seen.get(w_index, 0) + 1
            check_per_writer_order(
                events, {w.index: range(1, seen.get(w.index, 0) + 1) for w in mine}
            )
            for w in mine:
                assert seen.get(w.index, 0) >= w.acked, (w.index, seen.get(w.index), w.acked)
                assert await c.setup_append(w.writer_id, s) == seen[w.index]
