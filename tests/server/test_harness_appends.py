"""More of the append path through the in-memory harness (``harness.py``): what the
mutation check (``scripts/mutate.py``) found unguarded in ``server/appends.py``."""

from __future__ import annotations

import uuid
from pathlib import Path

from segmentstore_client.protocol import (
    AppendSetup,
    ErrorMessage,
    InvalidEventNumber,
    SetupAppend,
    build_blocks,
    encode,
    frame_event,
)

from .harness import Peer, harness
from .test_harness import acks, append, create, setup


async def test_java_style_blocks_are_stored(tmp_path: Path) -> None:
    """Guards Appends.precheck's pass-through of commands without an event number
    (AppendBlock, PartialEvent, Padding): the Java client's block shapes are stored whole."""
    async with harness(tmp_path) as h:
        peer = h.connect()
        await create(peer, "s")
        w = uuid.uuid4()
        await setup(peer, "s", w)
        records = [frame_event(b"event-%d" % n * 7) for n in range(1, 9)]
        commands = build_blocks(w, records, 1, 300, block_size=100)
        peer.send_raw(b"".join(encode(c) for c in commands))
        await peer.until(lambda: bool(acks(peer)) and acks(peer)[-1].event_number == 8, "acks")
        stored = h.server.ctx.store.try_read("s", 0, 1 << 20)
        assert stored is not None and bytes(stored.data) == b"".join(records)


async def test_resends_below_the_setup_number_are_acknowledged(tmp_path: Path) -> None:
    """Guards ``state.last_stored <= state.setup`` in Appends.precheck: right after
    SetupAppend, blocks whose numbers are below the one AppendSetup returned are resends
    (acknowledged without storing, reference 7.6), not a number going backwards."""
    async with harness(tmp_path) as h:
        first = h.connect()
        await create(first, "s")
        w = uuid.uuid4()
        await setup(first, "s", w)
        first.send_raw(b"".join(append(w, n, 100) for n in (1, 2, 3)))
        await first.until(lambda: len(acks(first)) == 3, "3 acks")
        length = h.server.ctx.store.info("s").length
        second = h.connect()
        assert await setup(second, "s", w) == 3
        second.send_raw(b"".join(append(w, n, 100) for n in (1, 2, 3, 4)))
        await second.until(lambda: len(acks(second)) == 4, "4 acks")
        assert [a.event_number for a in acks(second)] == [1, 2, 3, 4]
        assert not any(isinstance(c, InvalidEventNumber) for c in second.received)
        assert not second.closed
        assert h.server.ctx.store.info("s").length == length + length // 3


async def test_append_sessions_per_connection_are_capped(tmp_path: Path) -> None:
    """Guards the ``max_writers_per_connection`` check in Appends.setup: every writer id a
    connection sets up costs memory for the connection's life (1.5 KB measured), so a client
    opening new ones without end is refused with an ErrorMessage; the connection stays up,
    the writers it has keep working, and another connection has its own count."""
    async with harness(tmp_path, max_writers_per_connection=3) as h:
        peer = h.connect()
        await create(peer, "s")
        writers = [uuid.uuid4() for _ in range(3)]
        for w in writers:
            peer.send(SetupAppend(7, w, "s", ""))
        await peer.until(lambda: len(setups(peer)) == 3, "3 setups")
        extra = uuid.uuid4()
        peer.send(SetupAppend(8, extra, "s", ""), SetupAppend(9, writers[0], "s", ""))
        await peer.until(lambda: len(setups(peer)) == 4, "the known writer set up again")
        errors = [c for c in peer.received if isinstance(c, ErrorMessage)]
        assert [(e.request_id, e.segment) for e in errors] == [(8, "s")]
        assert "too many append sessions on this connection (max 3)" in errors[0].message
        assert extra not in {c.writer_id for c in setups(peer)}
        assert not peer.closed
        # The refused writer's data is refused as data without a session (connection closed
        # by the general path), never stored; the known writers still append first.
        peer.send_raw(append(writers[1], 1, 100))
        await peer.until(lambda: len(acks(peer)) == 1, "an ack for a writer within the cap")
        other = h.connect()
        await setup(other, "s", uuid.uuid4())  # a connection's own count
        before = h.server.ctx.store.info("s").length
        peer.send_raw(append(extra, 1, 100))
        await peer.until(lambda: peer.closed, "the refused writer's data closes the connection")
        assert h.server.ctx.store.info("s").length == before


def setups(peer: Peer) -> list[AppendSetup]:
    return [c for c in peer.received if isinstance(c, AppendSetup)]


async def test_append_sessions_are_capped_store_wide(tmp_path: Path) -> None:
    """Guards the ``store_writers`` check in Appends._too_many_writers: the writer ids of
    all connections together are bounded too; the sum is taken once a connection holds 64,
    a writer set up before is never refused, and a refusal leaves the connection up."""
    async with harness(tmp_path, store_writers=100) as h:
        a, b = h.connect(), h.connect()
        await create(a, "s")

        async def open_writers(peer: Peer, n: int) -> list[uuid.UUID]:
            ws = [uuid.uuid4() for _ in range(n)]
            had = len(setups(peer))
            peer.send(*(SetupAppend(7, w, "s", "") for w in ws))
            await peer.until(lambda: len(setups(peer)) == had + n, f"{n} setups")
            return ws

        first = await open_writers(a, 64)
        await open_writers(b, 30)
        await open_writers(a, 1)  # 95 in all: a sums and is still under the cap
        await open_writers(b, 5)  # 100; b holds fewer than 64 and does not sum
        a.send(SetupAppend(8, uuid.uuid4(), "s", ""), SetupAppend(9, first[0], "s", ""))
        await a.until(lambda: len(setups(a)) == 66, "the known writer set up again")
        errors = [c for c in a.received if isinstance(c, ErrorMessage)]
        assert [e.request_id for e in errors] == [8]
        assert "too many append sessions on this server (max 100)" in errors[0].message
        assert not a.closed and not b.closed
