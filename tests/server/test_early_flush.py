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
