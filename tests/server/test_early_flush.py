"""Acks and tail-read replies of a group commit leave in the turn that makes them
(server/early_flush.py), not one loop turn later."""

from __future__ import annotations

import asyncio

from segmentstore.server.early_flush import EarlyFlush


class _Conn:
    def __init__(self, name: str, order: list[str]) -> None:
        self.name = name
        self.order = order

    def flush_now(self) -> None:
        self.order.append(f"flush {self.name}")


async def test_flush_runs_behind_the_commits_callbacks_in_the_same_turn() -> None:
    loop = asyncio.get_running_loop()
    early = EarlyFlush(loop)
    order: list[str] = []
    a, b = _Conn("a", order), _Conn("b", order)

    def ack(conn: _Conn) -> None:
        order.append(f"ack {conn.name}")
        early.add(conn)
        loop.call_soon(order.append, f"own flush {conn.name}")  # what Connection.send does

    futs = [loop.create_future() for _ in range(3)]
    futs[0].add_done_callback(lambda _: ack(a))
    futs[1].add_done_callback(lambda _: ack(b))
    futs[2].add_done_callback(lambda _: ack(a))
    for fut in futs:  # the commit completes its futures ...
        fut.set_result(None)
    early.committed(3, 0.001)  # ... then calls its hook
    early.committed(1, 0.001)  # a second container's commit in the same turn: one flush
    for _ in range(3):
        await asyncio.sleep(0)
    acks, flushes, own = order[:3], order[3:5], order[5:]
    assert acks == ["ack a", "ack b", "ack a"]
    assert sorted(flushes) == ["flush a", "flush b"]  # each connection once, before ...
    assert own == ["own flush a", "own flush b", "own flush a"]  # ... the next turn


async def test_a_connection_that_flushed_by_itself_is_not_flushed_again() -> None:
    loop = asyncio.get_running_loop()
    early = EarlyFlush(loop)
    order: list[str] = []
    a, b = _Conn("a", order), _Conn("b", order)
    early.add(a)
    early.add(b)
    early.discard(a)
    early.committed()
    await asyncio.sleep(0)
    assert order == ["flush b"]
    early.committed()
    await asyncio.sleep(0)
    assert order == ["flush b"]  # nothing queued since


class _Read:
    """A woken tail read: its answer queues output on ``conn`` (what Reads.answer does)."""

    def __init__(self, early: EarlyFlush, conn: _Conn, order: list[str]) -> None:
        self.early, self.conn, self.order = early, conn, order

    def answer(self) -> None:
        self.order.append(f"answer {self.conn.name}")
        self.early.add(self.conn)


async def test_woken_reads_are_answered_after_the_acks_are_written_and_flushed_at_once() -> None:
    loop = asyncio.get_running_loop()
    early = EarlyFlush(loop)
    order: list[str] = []
    writer, reader, other = _Conn("w", order), _Conn("r", order), _Conn("o", order)
    early.add(writer)
    early.add(other)
    early.woken(_Read(early, reader, order))  # the commit wakes after its futures ...
    early.committed()  # ... and then calls its hook: still one flush_all
    early.woken(_Read(early, reader, order))
    await asyncio.sleep(0)
    assert order == ["flush w", "flush o", "answer r", "answer r", "flush r"]
    await asyncio.sleep(0)
    assert len(order) == 5


async def test_a_woken_read_alone_schedules_the_flush() -> None:
    """A seal, a delete or the store closing wakes reads outside a commit's hook."""
    loop = asyncio.get_running_loop()
    early = EarlyFlush(loop)
    order: list[str] = []
    early.woken(_Read(early, _Conn("r", order), order))
    await asyncio.sleep(0)
    assert order == ["answer r", "flush r"]
