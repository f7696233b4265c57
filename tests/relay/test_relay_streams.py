"""Streams as Databus sources (the controller on): one source per stream, all its segments
as physical partitions, and consumption over HTTP across manual scales with every event
once and each key's events in order (written with the SDK's stream writer, read with a
plain HTTP client)."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import segmentstore_client as sc
from controller.conftest import controller_uri  # tests/controller/conftest.py
from segmentstore_client.formats import databus
from segmentstore_client.relay import decode_events, set_schema

from .helpers import get, stream_all, write

if TYPE_CHECKING:
    from conftest import ServerProcess


def connect(srv: ServerProcess) -> sc.Client:
    return sc.connect(srv.endpoint, controller=controller_uri(srv))


async def sources(srv: ServerProcess) -> dict[str, dict[str, Any]]:
    status, _h, body = await get(srv.http_port, "/sources", {"v": "2"})
    assert status == 200
    return {s["name"]: s for s in json.loads(body)["sources"]}


async def write_round(w: Any, keys: int, n: int) -> None:
    await w.write_many(
        [f"k{i}:{n}".encode() for i in range(keys)], routing_keys=[f"k{i}" for i in range(keys)]
    )


def per_key(events: list[databus.DatabusEvent]) -> dict[str, list[int]]:
    seen: dict[str, list[int]] = {}
    for e in events:
        key, _, n = e.value.decode().rpartition(":")
        seen.setdefault(key, []).append(int(n))
    return seen


async def test_a_stream_is_one_source_with_its_segments(srv: ServerProcess) -> None:
    async with connect(srv) as client:
        await client.create_scope("shop")
        await client.create_stream("shop/orders", 3)
        await write(srv.endpoint, "plain/seg/0", [b"x"])  # a segment of no stream
        listed = await sources(srv)
        orders = listed["shop.orders"]
        assert 1 <= orders["id"] <= 32767
        assert orders["partitions"] == [f"shop/orders/{n}.#epoch.0" for n in range(3)]
        assert "plain.seg.0" in listed  # segments of no stream stay sources
        assert not any(n.startswith("shop.orders.") for n in listed)  # no segment of it is
        await client.scale_stream("shop/orders", 1)
        after = (await sources(srv))["shop.orders"]
        assert after["id"] == orders["id"]  # stable
        assert after["partitions"][-1] == "shop/orders/3.#epoch.1"
        assert len(after["partitions"]) == 4  # every epoch
        _s, _h, body = await get(srv.http_port, "/physicalBuffers")
        assert json.loads(body)["shop.orders:3"] == ["shop/orders/3.#epoch.1"]
        await set_schema(client, "shop.orders", '{"type": "string"}')
        _s, _h, body = await get(srv.http_port, "/register", {"sources": "shop.orders"})
        assert json.loads(body) == [
            {"id": orders["id"], "version": 1, "schema": '{"type": "string"}'}
        ]
        await client.create_stream("shop/returns", 1)
        ids = {s["id"] for s in (await sources(srv)).values()}
        assert len(ids) == len(await sources(srv))  # no two sources share an id
    srv.stop()
    srv.extra_args[srv.extra_args.index("--controller-port") + 1] = "0"
    srv.restart()
    assert (await sources(srv))["shop.orders"]["id"] == orders["id"]  # across a restart


async def test_consumption_across_scales_keeps_key_order(srv: ServerProcess) -> None:
    keys, rounds = 24, 30
    async with connect(srv) as client:
        await client.create_scope("sc")
        await client.create_stream("sc/s", 2)
        w = client.stream_writer("sc/s", linger=0.001)
        events: list[databus.DatabusEvent] = []
        cp: str | None = None
        for n in range(rounds):
            await write_round(w, keys, n)
            if n in (8, 18):
                await w.flush()
                # consume part of what is there, then scale with events still unread
                got, _a, cp = await stream_all(
                    srv.http_port, "sc.s", size=400, checkpoint=cp, max_answers=3
                )
                events += got
                await client.scale_stream("sc/s", 3 if n == 8 else 1)
        await w.close()
        got, _a, cp = await stream_all(srv.http_port, "sc.s", size=2000, checkpoint=cp)
        events += got
        assert len(events) == keys * rounds  # every event once
        assert per_key(events) == {f"k{i}": list(range(rounds)) for i in range(keys)}
        assert {e.physical_partition_id for e in events} == set(range(6))  # all segments
        parts = json.loads(cp)["partitions"]
        assert len(parts) == 6  # one position per segment, all epochs
        # the checkpoint resumes at the tail of the newest segment: nothing more, then new
        async with client.stream_writer("sc/s") as w2:
            await write_round(w2, keys, rounds)
        rest, _a, _cp = await stream_all(srv.http_port, "sc.s", checkpoint=cp)
        assert per_key(rest) == {f"k{i}": [rounds] for i in range(keys)}


async def test_long_poll_follows_a_scale(srv: ServerProcess) -> None:
    """A consumer waiting at the tail of a segment the scale seals wakes for the
    successor's events, well before its poll times out."""
    async with connect(srv) as client:
        await client.create_scope("lp")
        await client.create_stream("lp/s", 1)
        w = await client.stream_writer("lp/s").start()
        await write_round(w, 1, 0)
        await w.flush()
        first, _a, cp = await stream_all(srv.http_port, "lp.s")
        params = {"sources": "lp.s", "checkPoint": cp, "timeout": "20000"}
        waiting = asyncio.ensure_future(get(srv.http_port, "/stream", params))
        await asyncio.sleep(0.3)
        await client.scale_stream("lp/s", 2)
        await write_round(w, 1, 1)
        await w.flush()
        _status, _headers, body = await asyncio.wait_for(waiting, 8)
        got = [e for e in decode_events(body, False) if not e.end_of_period]
        assert [e.value for e in first + got] == [b"k0:0", b"k0:1"]
        await w.close()
