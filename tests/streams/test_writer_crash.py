"""Exactly once across a crash of a stream writer's process: a writer with
``exactly_once=True`` killed with SIGKILL mid-``write_many`` over a 4-segment stream, made
again with the same id and given the same input from the start, leaves every event once
with per-key order kept, also when the stream split between the two runs; a complete
input replayed after a merge writes nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import segmentstore_client as sc
from controller.conftest import Ctl, controller_uri

from .helpers import per_key, read_stream

CHILD = Path(__file__).with_name("stream_writer_child.py")
TOTAL, KEYS, CHUNK = 20_000, 64, 250


def child(ctl: Ctl, stream: str, wid: str) -> subprocess.Popen[str]:
    args = [ctl.server.endpoint, controller_uri(ctl.server), stream, wid]
    return subprocess.Popen(
        [sys.executable, str(CHILD), *args, str(TOTAL), str(KEYS), str(CHUNK)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def kill_midway(proc: subprocess.Popen[str], after: int) -> int:
    """SIGKILL ``proc`` once it queued ``after`` events; returns how many it had queued."""
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    queued = 0
    while queued < after:
        line = proc.stdout.readline()
        assert line and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
        queued = int(line)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    return queued


async def test_writer_killed_mid_write_many_replays_exactly_once(
    ctl: Ctl, client: sc.Client
) -> None:
    await client.create_scope("x")
    await client.create_stream("x/s", 4)
    queued = kill_midway(child(ctl, "x/s", "job-1"), TOTAL // 3)
    stored = per_key(await read_stream(client, "x/s"))
    held = sum(len(v) for v in stored.values())
    assert 0 < held < TOTAL, held  # killed mid-way, with part of it stored
    assert queued < TOTAL
    again = child(ctl, "x/s", "job-1")
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0 and out.endswith("done\n"), err[-2000:]
    seen = per_key(await read_stream(client, "x/s"))
    per = TOTAL // KEYS
    assert seen == {f"k{i}": list(range(per + (i < TOTAL % KEYS))) for i in range(KEYS)}
    assert len((await client.stream_info("x/s")).segments) == 4

    # after a merge (4 -> 2), the same complete input replayed again writes nothing
    await client.scale_stream("x/s", 2)
    third = child(ctl, "x/s", "job-1")
    out, err = third.communicate(timeout=120)
    assert third.returncode == 0 and out.endswith("done\n"), err[-2000:]
    assert per_key(await read_stream(client, "x/s")) == seen
    with pytest.raises(ValueError, match="writer_id"):
        client.stream_writer("x/s", exactly_once=True)


async def test_writer_killed_after_a_split_replays_exactly_once(
    ctl: Ctl, client: sc.Client
) -> None:
    await client.create_scope("y")
    await client.create_stream("y/s", 4)
    proc = child(ctl, "y/s", "job-2")
    assert proc.stdout is not None
    while (at := int(proc.stdout.readline() or TOTAL)) < TOTAL // 5:
        pass
    await client.scale_stream("y/s", 8)  # a split: each new segment has one predecessor
    queued = kill_midway(proc, min(TOTAL - CHUNK, at + TOTAL // 3))
    assert queued < TOTAL
    info = await client.stream_info("y/s")
    assert any(s.events for s in info.segments.values() if not s.sealed), "wrote after it"
    again = child(ctl, "y/s", "job-2")
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0 and out.endswith("done\n"), err[-2000:]
    per = TOTAL // KEYS
    seen = per_key(await read_stream(client, "y/s"))
    assert seen == {f"k{i}": list(range(per + (i < TOTAL % KEYS))) for i in range(KEYS)}
