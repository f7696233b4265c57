"""Reader group lifecycle against a real server: reader_offline, a server restart, and
reading while the stream scales 2 -> 5 -> 2 under a writer."""

from __future__ import annotations

import asyncio

import segmentstore_client as sc
from controller.conftest import Ctl

from .conftest import connect
from .helpers import scale_steps, write_rounds
from .test_reader_group import drain, fill


async def test_reader_offline_releases_at_once(client: sc.Client) -> None:
    await client.create_scope("f")
    await client.create_stream("f/s", 4)
    await fill(client, "f/s", 20, 20)
    group = await client.reader_group("f/g", ["f/s"], reader_timeout=600, sync_interval=0.1)
    gone = await group.reader("gone").join()
    it = gone.events()
    first = [(await anext(it)).data.decode() for _ in range(5)]
    await group.reader_offline("gone")  # no waiting for the 600 s timeout
    rest: list[str] = []
    await asyncio.wait_for(drain(group.reader("other"), rest, 1.5), 60)
    assert set(first) | set(rest) == {f"k{i}:{n}" for i in range(20) for n in range(20)}


async def test_group_state_survives_a_server_restart(ctl: Ctl) -> None:
    everything = {f"k{i}:{n}" for i in range(10) for n in range(40)}
    async with connect(ctl) as c:
        await c.create_scope("r")
        await c.create_stream("r/s", 2)
        await fill(c, "r/s", 10, 40)
        group = await c.reader_group("r/g", ["r/s"], sync_interval=0.1)
        reader = group.reader("r1")
        it = reader.events()
        before = [(await anext(it)).data.decode() for _ in range(150)]
        await reader.close()  # leaves at the offsets passed
    ctl.server.kill()  # kill -9: the state must be durable, not flushed at exit
    ctl.restart()
    async with connect(ctl) as c:
        group = await c.reader_group("r/g", ["r/s"], sync_interval=0.1)  # the same group
        after: list[str] = []
        await drain(group.reader("r2"), after)
    assert len(before) + len(after) == len(everything)
    assert set(before) | set(after) == everything


async def test_reading_while_scaling_keeps_key_order(client: sc.Client) -> None:
    keys, rounds = 12, 80
    await client.create_scope("w")
    await client.create_stream("w/s", 2)
    group = await client.reader_group("w/g", ["w/s"], sync_interval=0.1)
    readers = [await group.reader(f"r{i}").join() for i in range(2)]
    outs: list[list[str]] = [[], []]

    async def produce() -> None:
        async with client.stream_writer("w/s") as w:
            await write_rounds(w, keys, rounds, 0.01)

    await asyncio.gather(
        produce(),
        scale_steps(client, "w/s", [5, 2], 0.3),
        *(drain(r, outs[i], 3.0) for i, r in enumerate(readers)),
    )
    merged = outs[0] + outs[1]
    assert sorted(merged) == sorted(f"k{i}:{n}" for i in range(keys) for n in range(rounds))
    for out in outs:  # each reader sees each key's events in order
        last: dict[str, int] = {}
        for line in out:
            k, _, n = line.rpartition(":")
            assert int(n) > last.get(k, -1), (k, n)
            last[k] = int(n)
    assert len((await client.stream_info("w/s")).epochs) == 3
