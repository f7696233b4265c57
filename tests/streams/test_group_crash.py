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
from segmentstore_client.streams.reader_group import GroupReader, ReaderGroup

from .test_reader_group import drain, fill

CHILD = Path(__file__).with_name("group_reader_child.py")


def spawn_reader(ctl: Ctl, group: str, stream: str, rid: str) -> subprocess.Popen[str]:
    """A group member in its own process that prints each event it reads."""
    args = [ctl.server.endpoint, controller_uri(ctl.server), group, stream, rid]
    return subprocess.Popen(
        [sys.executable, str(CHILD), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


async def doomed_group(
    ctl: Ctl, client: sc.Client, scope: str, segments: int, keys: int, rid: str
) -> tuple[ReaderGroup, set[str], subprocess.Popen[str]]:
    """Stream ``<scope>/s`` with 50 events per key, group ``<scope>/g`` (reader timeout
    1.5 s) and its member ``rid`` reading in a child process."""
    await client.create_scope(scope)
    await client.create_stream(f"{scope}/s", segments)
    await fill(client, f"{scope}/s", keys, 50)
    everything = {f"k{i}:{n}" for i in range(keys) for n in range(50)}
    group = await client.reader_group(
        f"{scope}/g", [f"{scope}/s"], reader_timeout=1.5, sync_interval=0.1
    )
    return group, everything, spawn_reader(ctl, f"{scope}/g", f"{scope}/s", rid)


def first_lines(proc: subprocess.Popen[str], n: int) -> list[str]:
    """The first ``n`` events the child read (within 60 s)."""
    assert proc.stdout is not None
    got: list[str] = []
    deadline = time.monotonic() + 60
    while len(got) < n:
        line = proc.stdout.readline()
        assert line and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
        got.append(line.strip())
    return got


def kill_9(proc: subprocess.Popen[str]) -> list[str]:
    """SIGKILL the child; the events it printed before dying that were not read yet."""
    assert proc.stdout is not None
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    return [line.strip() for line in proc.stdout.read().splitlines()]


async def test_reader_process_killed_mid_read(ctl: Ctl, client: sc.Client) -> None:
    group, everything, proc = await doomed_group(ctl, client, "k", 4, 40, "doomed")
    dead = first_lines(proc, 300)  # it holds all four segments and is mid-way through them
    # a checkpoint the doomed reader passes while alive
    cuts = await group.checkpoint("before-kill", timeout=20)
    dead += kill_9(proc)
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


async def test_a_checkpoint_when_the_only_reader_was_killed(ctl: Ctl, client: sc.Client) -> None:
    """The group's one reader dies (SIGKILL) mid-read; a checkpoint taken then has no live
    reader to expire it: it used to wait out its timeout. It completes after the reader
    timeout at the dead reader's last synced offsets, and a group from its cuts reads
    every event the dead reader had not passed (at least once, nothing lost)."""
    group, everything, proc = await doomed_group(ctl, client, "o", 2, 20, "only")
    dead = first_lines(proc, 200)
    dead += kill_9(proc)
    t0 = time.monotonic()
    cuts = await group.checkpoint("after-kill", timeout=10)
    assert time.monotonic() - t0 < 6  # the reader timeout (1.5 s), not the checkpoint's
    assert "only" not in (await group.state())["heartbeats"]
    again = await client.reader_group("o/again", ["o/s"], cuts)
    after: list[str] = []
    await drain(again.reader("r"), after)
    assert set(dead) | set(after) == everything  # nothing lost
    assert len(after) == len(set(after))
