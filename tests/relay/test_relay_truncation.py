"""A stream source under truncation (the controller's truncateStream, as retention calls
it): ``/stream`` answers "checkpoint too old" exactly when the truncation took events the
checkpoint had not read, whether it deleted a segment or cut into one; a checkpoint that
had read everything the truncation took goes on with no gap and no duplicate. Written
with the SDK, read with a plain HTTP client."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import segmentstore_client as sc
from controller.conftest import controller_uri  # tests/controller/conftest.py
from segmentstore_client.relay import CheckpointTooOld, FileCheckpointStore, RelayConsumer
from segmentstore_client.streams import RetentionPolicy, StreamCut

from .helpers import get, stream_all

if TYPE_CHECKING:
    from conftest import ServerFactory, ServerProcess


@contextlib.asynccontextmanager
async def new_stream(srv: ServerProcess, stream: str, first: list[str]) -> AsyncIterator[sc.Client]:
    """A client, with a new one-segment stream holding ``first``."""
    async with sc.connect(srv.endpoint, controller=controller_uri(srv)) as client:
        await client.create_scope(stream.split("/")[0])
        await client.create_stream(stream, 1)
        await write(client, stream, first)
        yield client


async def write(client: sc.Client, stream: str, values: list[str]) -> None:
    async with client.stream_writer(stream) as w:
        await w.write_many([v.encode() for v in values], routing_keys=["k"] * len(values))


async def segments(client: sc.Client, stream: str) -> dict[int, int]:
    """The stream's active segments (id -> length)."""
    scope, name = stream.split("/")
    out = {}
    for r in await client.controller.current_segments(scope, name):
        info = await client.segment_info(
            f"{stream}/{r.segment & 0xFFFFFFFF}.#epoch.{r.segment >> 32}"
        )
        out[r.segment] = info.length
    return out


def values(events: list[object]) -> list[bytes]:
    return [e.value for e in events]  # type: ignore[attr-defined]


async def test_truncation_that_deletes_an_unfinished_segment(
    srv: ServerProcess, tmp_path: Path
) -> None:
    port = srv.http_port
    async with new_stream(srv, "tr/s", [f"a{i}" for i in range(10)]) as client:
        # behind: has read 3 of segment 0's 10 events; done: all 10; idle: all 10, and
        # does not poll again before the truncation (so the relay never saw it at the end
        # of the sealed segment)
        got, _a, behind = await stream_all(port, "tr.s", size=120, max_answers=3)
        assert 0 < len(got) < 10
        got, _a, done = await stream_all(port, "tr.s")
        assert values(got) == [b"a%d" % i for i in range(10)]
        idle = done
        await client.scale_stream("tr/s", 1)
        await write(client, "tr/s", [f"b{i}" for i in range(5)])
        got, _a, done = await stream_all(port, "tr.s", checkpoint=done)
        assert values(got) == [b"b%d" % i for i in range(5)]
        # truncate at the start of segment 1: segment 0 is deleted
        (seg1,) = await segments(client, "tr/s")
        await client.truncate_stream(StreamCut("tr/s", {seg1: 0}))
        status, headers, body = await get(
            port, "/stream", {"sources": "tr.s", "checkPoint": behind, "timeout": "0"}
        )
        assert status == 200 and body == b""
        assert headers["X-Databus-Error"] == "checkpoint-too-old"
        assert "segment 0" in headers["X-Databus-Error-Cause"]
        # the SDK's consumer raises, and keeps the checkpoint it had
        saved = tmp_path / "behind.ckpt"
        saved.write_text(behind)
        url = f"http://127.0.0.1:{port}"
        store = FileCheckpointStore(saved)
        async with RelayConsumer(url, ["tr.s"], checkpoint_store=store, hold_ms=0) as consumer:
            with pytest.raises(CheckpointTooOld, match="segment 0"):
                await consumer.poll()
        assert saved.read_text() == behind
        # the two that had read segment 0 to its end lose nothing
        got, _a, idle = await stream_all(port, "tr.s", checkpoint=idle)
        assert values(got) == [b"b%d" % i for i in range(5)]
        got, _a, done = await stream_all(port, "tr.s", checkpoint=done)
        assert got == []
        # a new consumer starts at the oldest event kept
        got, _a, fresh = await stream_all(port, "tr.s")
        assert values(got) == [b"b%d" % i for i in range(5)]
        # the checkpoints forgot the deleted segment and took the new cut
        for cp in (idle, done, fresh):
            parsed = json.loads(cp)
            assert list(parsed["heads"].values()) == [{"1": 0}]
            assert [k.split(":")[1] for k in parsed["partitions"]] == ["1"]
        await write(client, "tr/s", ["c0"])
        got, _a, _cp = await stream_all(port, "tr.s", checkpoint=idle)
        assert values(got) == [b"c0"]


async def test_truncation_inside_a_segment(srv: ServerProcess) -> None:
    port = srv.http_port
    async with new_stream(srv, "tc/s", [f"a{i}" for i in range(4)]) as client:
        (seg0,) = await segments(client, "tc/s")
        _got, _a, at4 = await stream_all(port, "tc.s")  # read a0..a3
        await client.scale_stream("tc/s", 1)
        (seg1,) = await segments(client, "tc/s")
        # read_a0_a3: has read all of segment 0, nothing of segment 1
        before = at4
        await write(client, "tc/s", [f"b{i}" for i in range(10)])
        middle = (await segments(client, "tc/s"))[seg1] // 2  # record length is constant
        got, _a, half = await stream_all(port, "tc.s", checkpoint=at4, size=10_000)
        assert values(got) == [b"b%d" % i for i in range(10)]
        # a checkpoint that read b0..b4 exactly (b5 starts at ``middle``): one event an
        # answer (each is a window of its own, larger than ``size``)
        got, _a, five = await stream_all(port, "tc.s", checkpoint=at4, size=1, max_answers=5)
        assert values(got) == [b"b%d" % i for i in range(5)]
        await client.truncate_stream(StreamCut("tc/s", {seg1: middle}))
        assert seg0 != seg1
        # never read from segment 1, whose first half is gone: too old
        status, headers, body = await get(
            port, "/stream", {"sources": "tc.s", "checkPoint": before, "timeout": "0"}
        )
        assert status == 200
        assert headers["X-Databus-Error"] == "checkpoint-too-old" and body == b""
        assert f"truncated at {middle}" in headers["X-Databus-Error-Cause"]
        # read up to exactly the cut: goes on with b5..b9
        got, _a, _cp = await stream_all(port, "tc.s", checkpoint=five)
        assert values(got) == [b"b%d" % i for i in range(5, 10)]
        # read b0..b9: nothing missing, nothing more
        got, _a, _cp = await stream_all(port, "tc.s", checkpoint=half)
        assert got == []


async def test_retention_deletes_a_segment_a_consumer_had_not_finished(
    server_factory: ServerFactory,
) -> None:
    """Retention by size (cuts every 0.3 s) truncates at a cut in segment 1: the segment 0
    that a slow consumer is still reading goes, and its next request is too old; one that
    had read all of segment 1 up to the cut goes on with the rest."""
    fast = {
        "SEGMENTSTORE_CONTROLLER_TICK_S": "0.1",
        "SEGMENTSTORE_CONTROLLER_RETENTION_INTERVAL_S": "0.3",
    }
    srv = server_factory(extra_args=["--controller-port", "0"], env=fast)
    srv.start()
    port = srv.http_port
    async with sc.connect(srv.endpoint, controller=controller_uri(srv)) as client:
        await client.create_scope("rt")
        await client.create_stream("rt/s", 1, retention=RetentionPolicy.by_size(1000))
        await write(client, "rt/s", [f"a{i:03}" for i in range(20)])
        _got, _a, slow = await stream_all(port, "rt.s", size=1, max_answers=3)
        await client.scale_stream("rt/s", 1)
        await write(client, "rt/s", [f"b{i:03}" for i in range(20)])
        got, _a, quick = await stream_all(port, "rt.s", checkpoint=slow)
        assert len(got) == 37
        await asyncio.sleep(0.8)  # a cut at the tail of segment 1 is recorded
        await write(client, "rt/s", ["c" * 2400])  # one event: no cut falls inside it
        for _ in range(100):  # until retention truncates (bounded: 10 s)
            status, headers, body = await get(
                port, "/stream", {"sources": "rt.s", "checkPoint": slow, "timeout": "0"}
            )
            if headers.get("X-Databus-Error") == "checkpoint-too-old":
                break
            await asyncio.sleep(0.1)
        assert status == 200 and body == b""
        assert headers.get("X-Databus-Error") == "checkpoint-too-old"
        assert "segment 0" in headers["X-Databus-Error-Cause"]
        got, _a, _cp = await stream_all(port, "rt.s", checkpoint=quick)
        assert values(got) == [b"c" * 2400]
