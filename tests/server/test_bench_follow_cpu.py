"""Issue 19, session 14: ``scripts/bench_follow_cpu.py`` measures what a tailing reader
costs the server; a followed round must append every event, and its follower must see
every one of them (its latencies pair each send with its receipt)."""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
sys.path.insert(0, str(SCRIPTS))

from bench_follow_cpu import run_round, thread_cpu  # noqa: E402
from bench_lone_rtt import create  # noqa: E402

if TYPE_CHECKING:
    from conftest import ServerProcess  # tests/conftest.py


async def test_a_followed_round_is_seen_whole_by_its_follower(
    module_server: ServerProcess,
) -> None:
    name = f"follow/{uuid.uuid4().hex}/0"
    await create(module_server.endpoint, [name])
    args = argparse.Namespace(events=40, size=100)
    line = await asyncio.to_thread(run_round, module_server, name, args, True)
    assert line.startswith("ack p50") and "| follower p50" in line, line
    cpu = thread_cpu(module_server.pid)
    assert cpu["loop"] > 0 and set(cpu) == {"loop", "other"}
