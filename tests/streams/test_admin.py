"""Stream administration through the SDK against a real server and controller."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import segmentstore_client as sc
from controller.conftest import Ctl
from segmentstore_client.streams import (
    NoSuchStream,
    RetentionPolicy,
    ScalingPolicy,
    StreamCut,
    StreamExists,
)


async def test_scopes_and_streams_lifecycle(client: sc.Client) -> None:
    assert await client.create_scope("shop")
    assert not await client.create_scope("shop", exist_ok=True)
    with pytest.raises(StreamExists):
        await client.create_scope("shop")
    assert "shop" in await client.list_scopes()
    assert await client.create_stream("shop/orders", 3, tags=["a", "b"])
    assert await client.create_stream(
        "shop/rated",
        scaling=ScalingPolicy.by_event_rate(100, 2, 2),
        retention=RetentionPolicy.by_size(1 << 30),
    )
    assert not await client.create_stream("shop/orders", 3, exist_ok=True)
    with pytest.raises(StreamExists):
        await client.create_stream("shop/orders", 3)
    with pytest.raises(NoSuchStream):
        await client.create_stream("nope/orders", 1)
    assert await client.list_streams("shop") == ["shop/orders", "shop/rated"]
    assert await client.stream_tags("shop/orders") == ["a", "b"]
    info = await client.stream_info("shop/rated")
    assert len(info.epochs) == 1 and len(info.epochs[0]) == 2
    with pytest.raises(ValueError, match="scope/stream"):
        await client.create_stream("no-slash", 1)
    assert await client.delete_stream("shop/orders")
    assert not await client.delete_stream("shop/orders", missing_ok=True)
    with pytest.raises(NoSuchStream):
        await client.delete_stream("shop/orders")
    assert await client.delete_stream("shop/rated")
    assert await client.delete_scope("shop")
    assert not await client.delete_scope("shop", missing_ok=True)


async def test_info_scale_seal_truncate(client: sc.Client) -> None:
    await client.create_scope("s")
    await client.create_stream("s/t", 2)
    info = await client.stream_info("s/t")
    segs = [r.segment for r in info.epochs[0]]
    assert info.head.positions == dict.fromkeys(segs, 0)
    assert info.tail.positions == dict.fromkeys(segs, 0)
    # write two events into the first segment directly, then scale 2 -> 3
    name = info.segments[segs[0]].name
    async with client.writer(name) as w:
        await w.write_many([b"one", b"two"])
    new = await client.scale_stream("s/t", 3)
    assert len(new) == 3 and all(r.segment >> 32 == 1 for r in new)
    info = await client.stream_info("s/t")
    assert len(info.epochs) == 2
    first = info.segments[segs[0]]
    assert first.sealed and first.events == 2 and first.length == 2 * (8 + 3)
    assert set(info.tail.positions) == {r.segment for r in new}
    # truncate at a cut past the first segment's first event
    cut = StreamCut("s/t", {segs[0]: 11, segs[1]: 0})
    await client.truncate_stream(cut)
    info = await client.stream_info("s/t")
    assert info.head.positions[segs[0]] == 11
    assert StreamCut.from_json(info.head.to_json()) == info.head
    await client.seal_stream("s/t")
    assert (await client.stream_info("s/t")).sealed
    with pytest.raises(sc.SegmentSealed):
        async with client.writer(info.segments[new[0].segment].name) as w:
            await w.write(b"late")


def test_stream_cut_json_rejects_garbage() -> None:
    cut = StreamCut("a/b", {1 << 32 | 3: 100, 2: 0})
    assert StreamCut.from_json(cut.to_json()) == cut
    for bad in [
        "",
        "[]",
        "{}",
        json.dumps({"format": "segmentstore.streamcut/1"}),
        json.dumps({"format": "segmentstore.streamcut/1", "stream": "a/b", "positions": {"x": 1}}),
        json.dumps({"format": "segmentstore.streamcut/1", "stream": "a/b", "positions": {"1": -5}}),
    ]:
        with pytest.raises(ValueError, match="not a stream cut"):
            StreamCut.from_json(bad)


async def test_unreachable_controller_is_one_clear_error(ctl: Ctl) -> None:
    async with sc.connect(
        ctl.server.endpoint, controller="tcp://127.0.0.1:1", request_timeout=3
    ) as c:
        with pytest.raises((sc.ConnectFailed, sc.Timeout)):
            await c.list_scopes()


def test_sdk_imports_without_grpc_and_names_the_extra() -> None:
    code = (
        "import sys, asyncio\n"
        "sys.modules['grpc'] = None\n"  # as if grpcio were not installed
        "import segmentstore_client as sc\n"
        "try:\n"
        "    asyncio.run(sc.connect('tcp://127.0.0.1:1').list_scopes())\n"
        "except ImportError as e:\n"
        "    print('ERR', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "ERR streams need grpcio" in out.stdout and "segmentstore[streams]" in out.stdout
