"""Issue 19, round 6: the benchmarks' "100 segments active" load can come from another
process with its own client (``bench_peers.background_process``), which is what other
clients writing means for a server; the old variant shares the probe's loop and client.

The process must really write (every background segment grows while it runs), stop when
its context ends, and fail with one clear error when it cannot start its writers."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import segmentstore_client as sc

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from bench_peers import background_process

if TYPE_CHECKING:
    from conftest import ServerProcess  # tests/conftest.py


async def lengths(endpoint: str, names: list[str]) -> list[int]:
    async with sc.connect(endpoint) as client:
        return [(await client.segment_info(n)).length for n in names]


def test_the_background_process_writes_every_segment_and_stops(server: ServerProcess) -> None:
    names = [f"bgtest/probe/0-bg{i}" for i in range(3)]
    with background_process(server.endpoint, "bgtest/probe/0", 3):
        first = asyncio.run(lengths(server.endpoint, names))
        deadline = time.monotonic() + 10
        grown = first
        while time.monotonic() < deadline and not all(
            b > a for a, b in zip(first, grown, strict=True)
        ):
            time.sleep(0.05)
            grown = asyncio.run(lengths(server.endpoint, names))
    assert all(b > a for a, b in zip(first, grown, strict=True)), (first, grown)
    stopped = asyncio.run(lengths(server.endpoint, names))
    time.sleep(0.1)
    assert asyncio.run(lengths(server.endpoint, names)) == stopped  # nobody writes any more


def test_no_server_is_one_clear_error() -> None:
    t0 = time.monotonic()
    with (
        pytest.raises(RuntimeError, match=r"exited .* before its writers"),
        background_process("tcp://127.0.0.1:9", "bgtest/none/0", 2),
    ):
        pass
    assert time.monotonic() - t0 < 20
