"""/containerStats and /relayStats over plain HTTP: the spec's field names, numbers that
follow what was appended and served, inbound clients = the writers, 404 for unknowns."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from .helpers import db_windows, get, source_name, stream_all, unique_segment, write

if TYPE_CHECKING:
    from conftest import ServerProcess


async def stat(port: int, path: str, status: int = 200) -> Any:
    got, _headers, body = await get(port, path)
    assert got == status, (path, body)
    return json.loads(body)


async def test_container_and_relay_stats(module_server: ServerProcess) -> None:
    port = module_server.http_port
    seg = unique_segment()
    name = source_name(seg)
    await write(module_server.endpoint, seg, db_windows(10, 3, first_seq=500))
    sources = {s["name"]: s["id"] for s in await stat(port, "/sources")}
    src = str(sources[name])
    events, _a, _cp = await stream_all(port, name, size=400)
    assert len(events) == 30
    params = {"sources": name, "client": "stats-probe", "timeout": "0"}
    await get(port, "/stream", params)
    await get(port, "/stream", {**params, "checkPoint": '{"windowScn": 1, "windowOffset": -1}'})
    await get(port, "/stream", {"sources": "no.such", "client": "stats-probe"})

    # inbound: what the segments hold, with the spec's buffer fields
    assert src in await stat(port, "/containerStats/inbound/events/sources")
    buf = await stat(port, f"/containerStats/inbound/events/source/{src}")
    assert (buf["minScn"], buf["maxScn"], buf["numDataEvents"]) == (500, 509, 30)
    assert buf["sizeDataEvents"] > 30 * 45 and buf["freeSpace"] > 0
    assert buf["dimension"] == name and buf["timestampMaxScnEvent"] >= buf["timestampMinScnEvent"]
    psource = f"{name}:0"
    assert psource in await stat(port, "/containerStats/inbound/events/psources")
    pbuf = await stat(port, f"/containerStats/inbound/events/psource/{psource}")
    assert pbuf["maxScn"] == 509 and pbuf["numDataEvents"] == 30
    total = await stat(port, "/containerStats/inbound/events/total")
    assert total["numDataEvents"] >= 30
    writers = await stat(port, "/containerStats/inbound/clients")
    assert writers  # the SDK writer's id, kept as a segment attribute
    mine = await stat(port, f"/containerStats/inbound/client/{writers[0]}")
    assert mine["dimension"] == writers[0] and mine["lastEventNumbers"]
    inbound = await stat(port, "/containerStats/inbound/total")
    assert inbound["numEvents"] >= 30 and inbound["numBytes"] > 0

    # outbound: what the relay served, per source and per client
    out = await stat(port, f"/containerStats/outbound/events/source/{src}")
    assert out["numDataEvents"] == 3 * 30  # stream_all, then the probe's two reads of all
    assert out["sizeDataEvents"] > 0
    assert "stats-probe" in await stat(port, "/containerStats/outbound/clients")
    probe = await stat(port, "/containerStats/outbound/events/client/stats-probe")
    assert probe["numDataEvents"] == 2 * 30  # flexible: all; after SCN 1: all again
    conn = await stat(port, "/containerStats/outbound/total")
    assert conn["numOpenConns"] >= 1 and conn["events"] >= 90

    # relayStats: calls per client and per source
    assert "stats-probe" in await stat(port, "/relayStats/outbound/http/clients")
    calls = await stat(port, "/relayStats/outbound/http/client/stats-probe")
    assert calls["numStreamCalls"] == 3 and calls["numErrStream"] == 1
    assert calls["maxStreamWinScn"] == 509
    per_src = await stat(port, f"/relayStats/outbound/http/source/{src}")
    assert per_src["numStreamCalls"] >= 3 and per_src["dimension"] == name
    assert src in await stat(port, "/relayStats/outbound/http/sources")
    total_calls = await stat(port, "/relayStats/outbound/http/total")
    assert total_calls["numStreamCalls"] >= calls["numStreamCalls"]

    # unknowns answer 404 the relay's way
    for path in (
        "/containerStats/outbound/client/nobody",
        "/containerStats/inbound/events/psource/none:0",
        "/containerStats/sideways/total",
        "/relayStats/outbound/http/client/nobody",
        "/relayStats/outbound/http/source/999999",
        "/containerStats/inbound/events/bogus",
    ):
        got, headers, _b = await get(port, path)
        assert got == 404 and headers["X-Databus-Error"], path
