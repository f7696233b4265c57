"""Reader groups when a member dies or idles: a reader process killed with SIGKILL
mid-read loses its segments after the timeout and the survivor reads on from its last
synced offsets (at-least-once: nothing lost, the survivor reads nothing twice); a group
from a checkpoint taken before the kill reads exactly what follows it; readers idle at
the tail still pass a checkpoint; ``group.delete()`` drops the group's state."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import segmentstore_client as sc
from controller.conftest import Ctl, controller_uri
from segmentstore_client.streams.reader_group import GroupReader

from .test_reader_group import drain, fill

CHILD = Path(__file__).with_name("group_reader_child.py")


async def test_reader_process_killed_mid_read(ctl: Ctl, client: sc.Client) -> None:
    keys, per_key = 40, 50
    await client.create_scope("k")
    await client.create_stream("k/s", 4)
    await fill(client, "k/s", keys, per_key)
    everything = {f"k{i}:{n}" for i in range(keys) for n in range(per_key)}
    group = await client.reader_group("k/g", ["k/s"], reader_timeout=1.5, sync_interval=0.1)
    args = [ctl.server.endpoint, controller_uri(ctl.server), "k/g", "k/s", "doomed"]
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    dead: list[str] = []
    deadline = time.monotonic() + 60
    while len(dead) < 300:  # it holds all four segments and is mid-way through them
        line = proc.stdout.readline()
        assert line and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
        dead.append(line.strip())
    # a checkpoint the doomed reader passes while alive
    cuts = await group.checkpoint("before-kill", timeout=20)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    dead += [line.strip() for line in proc.stdout.read().splitlines()]
    survivor: list[str] = []
    await drain(group.reader("survivor"), survivor, idle=4.0)  # waits out the timeout
    assert set(dead) | set(survivor) == everything  # nothing lost
    assert len(survivor) == len(set(survivor))  # the survivor read nothing twice
    assert "doomed" not in (await group.state())["heartbeats"]
    # exactly once from the checkpoint: a new group from its cuts reads what follows
    again = await client.reader_group("k/again", ["k/s"], cuts)
    after: list[str] = []
    await drain(again.reader("r"), after)
    upto: list[str] = []
    info = await client.stream_info("k/s")
    for sid, off in cuts[0].positions.items():
        async for ev in client.reader(info.segments[sid].name):
            if ev.offset < off:
                upto.append(ev.data.decode())
    assert sorted(upto + after) == sorted(everything)
    assert set(upto) <= set(dead)  # the cut was passed: everything before it was read
    assert await again.delete() and await group.delete()


async def test_idle_readers_pass_a_checkpoint_and_delete(client: sc.Client) -> None:
    await client.create_scope("i")
    await client.create_stream("i/s", 2)
    await fill(client, "i/s", 10, 10)
    group = await client.reader_group("i/g", ["i/s"], sync_interval=0.5)
    readers = [await group.reader(f"r{i}").join() for i in range(3)]  # one has no segment
    got: list[str] = []

    async def follow(r: GroupReader) -> None:
        async for ev in r.events():
            got.append(ev.data.decode())

    tasks = [asyncio.create_task(follow(r)) for r in readers]
    for _ in range(200):
        if len(got) == 100:
            break
        await asyncio.sleep(0.05)
    assert len(got) == 100
    t0 = time.monotonic()
    cuts = await group.checkpoint("idle", timeout=10)  # every reader idles at the tail
    assert time.monotonic() - t0 < 5
    tail = (await client.stream_info("i/s")).tail
    assert cuts[0].positions == tail.positions
    for r in readers:
        await r.close()
    await asyncio.wait_for(asyncio.gather(*tasks), 10)
    assert await group.delete()
    assert not await group.delete(missing_ok=True)
    assert await group.state() == {}  # the table is gone; made again from the start:
    fresh = await client.reader_group("i/g", ["i/s"])
    assert len([ev async for ev in fresh.reader("r").events(idle_timeout=1)]) == 100
