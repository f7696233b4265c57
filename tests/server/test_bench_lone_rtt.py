"""Issue 19, session 13: ``scripts/bench_lone_rtt.py`` times a lone append through a bare
socket and through the SDK; each timed event must really be appended and acknowledged."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import socket
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import segmentstore_client as sc

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
sys.path.insert(0, str(SCRIPTS))

from bench_lone_rtt import (  # noqa: E402
    _frame,
    create,
    follower,
    percentiles,
    raw_round,
    sdk_round,
)

if TYPE_CHECKING:
    from conftest import ServerProcess  # tests/conftest.py


async def _length(endpoint: str, name: str) -> int:
    client = await sc.connect(endpoint)
    try:
        info = await client.segment_info(name)
        return info.length
    finally:
        await client.close()


async def test_both_clients_append_every_timed_event(module_server: ServerProcess) -> None:
    ep = module_server.endpoint
    raw_seg, sdk_seg = f"rtt/{uuid.uuid4().hex}/raw", f"rtt/{uuid.uuid4().hex}/sdk"
    await create(ep, [raw_seg, sdk_seg])
    raw = await asyncio.to_thread(raw_round, module_server.port, raw_seg, 25, 100)
    sdk = await sdk_round(ep, sdk_seg, 25, 100)
    assert len(raw) == len(sdk) == 25 and all(x > 0 for x in raw + sdk)
    # 25 events of 100 B, each framed with the 8-byte event header.
    assert await _length(ep, raw_seg) == 25 * 108
    assert await _length(ep, sdk_seg) == 25 * 108
    p50, p99 = percentiles(raw)
    assert 0 < p50 <= p99


async def test_the_follower_reads_while_the_round_runs_and_stops(
    module_server: ServerProcess,
) -> None:
    """``--follow``: a tailing reader runs in another process while the round appends, the
    round still appends every event, and no process is left when the block ends."""
    ep = module_server.endpoint
    seg = f"rtt/{uuid.uuid4().hex}/follow"
    await create(ep, [seg])

    def run() -> None:
        with follower(ep, seg, True):
            raw_round(module_server.port, seg, 20, 100)
            children = mp.active_children()
            assert any(p.is_alive() for p in children)
        assert not [p for p in mp.active_children() if p.is_alive()]

    await asyncio.to_thread(run)
    assert await _length(ep, seg) == 20 * 108


def test_a_bad_frame_length_is_refused() -> None:
    a, b = socket.socketpair()
    with a, b:
        b.sendall(b"\x00\x00\x00\x07\xff\xff\xff\xfb")  # length -5
        with pytest.raises(ValueError, match="bad frame length"):
            _frame(a, bytearray())
        b.close()
        with pytest.raises(EOFError):
            _frame(a, bytearray())
