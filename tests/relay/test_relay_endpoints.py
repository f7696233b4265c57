"""The relay's other endpoints against a real server: /register with schemas set through
the SDK, /startSCN, /targetSCN and /bootstrap (snapshot then catch-up, then /stream with
no gap), inspection (/physicalSources, /physicalBuffers, /bufferInfo, /stats), control
(/controlSources pause/unpause/shutdown/start/status, /relayCommand/disconnectClients)."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import segmentstore_client as sc
from segmentstore_client.relay import decode_events, set_schema

from .helpers import db_windows, get, source_name, stream_all, unique_segment, write

if TYPE_CHECKING:
    from conftest import ServerProcess


async def _ids(port: int) -> dict[str, int]:
    _s, _h, body = await get(port, "/sources")
    return {s["name"]: s["id"] for s in json.loads(body)}


async def test_register_serves_schemas_set_through_the_sdk(module_server: ServerProcess) -> None:
    seg, other = unique_segment(), unique_segment()
    await write(module_server.endpoint, seg, [b"x"])
    await write(module_server.endpoint, other, [b"x"])
    async with sc.connect(module_server.endpoint) as client:
        await set_schema(client, source_name(seg), '{"type":"record","name":"A"}', version=1)
        await set_schema(client, source_name(seg), '{"type":"record","name":"A2"}', version=2)
    ids = await _ids(module_server.http_port)
    status, _h, body = await get(
        module_server.http_port, "/register", {"sources": str(ids[source_name(seg)])}
    )
    assert status == 200
    assert json.loads(body) == [
        {"id": ids[source_name(seg)], "version": 1, "schema": '{"type":"record","name":"A"}'},
        {"id": ids[source_name(seg)], "version": 2, "schema": '{"type":"record","name":"A2"}'},
    ]
    status, headers, _b = await get(
        module_server.http_port, "/register", {"sources": source_name(other)}
    )
    assert status == 404 and "no schema" in headers["X-Databus-Error-Cause"]
    status, _h, _b = await get(module_server.http_port, "/register", {"sources": "999999"})
    assert status == 404
    _s, _h, body = await get(module_server.http_port, "/register")
    assert any(o["id"] == ids[source_name(seg)] for o in json.loads(body))


async def test_bootstrap_snapshot_then_catchup_then_stream(module_server: ServerProcess) -> None:
    seg = unique_segment()
    port = module_server.http_port
    await write(module_server.endpoint, seg, db_windows(20, 3, first_seq=1000))
    name = source_name(seg)
    _s, _h, body = await get(port, "/startSCN", {"sources": name, "checkPoint": "{}"})
    start_scn = int(json.loads(body))
    assert start_scn == 1019
    await write(module_server.endpoint, seg, db_windows(5, 3, first_seq=2000))  # after it
    cp = json.dumps({"consumption_mode": "BOOTSTRAP_SNAPSHOT", "bootstrap_start_scn": start_scn,
                     "snapshot_source": name})  # fmt: skip
    keys: list[int] = []
    phase = "FALSE"
    for _ in range(100):
        status, headers, body = await get(
            port, "/bootstrap", {"sources": name, "checkPoint": cp, "batchSize": "400"}
        )
        assert status == 200
        keys.extend(int(e.key) for e in decode_events(body, False) if not e.end_of_period)  # type: ignore[arg-type]
        cp, phase = headers["X-Databus-Checkpoint"], headers["PhaseCompleted"]
        if phase == "TRUE":
            break
    assert phase == "TRUE" and keys == list(range(60))  # the snapshot stops at startSCN
    _s, _h, body = await get(port, "/targetSCN", {"source": name})
    target = int(json.loads(body))
    assert target == 2004
    cp_obj = json.loads(cp)
    cp_obj.update(consumption_mode="BOOTSTRAP_CATCHUP", bootstrap_target_scn=target)
    status, headers, body = await get(
        port, "/bootstrap", {"sources": name, "checkPoint": json.dumps(cp_obj), "output": "json"}
    )
    assert headers["PhaseCompleted"] == "TRUE"
    catchup = [e for e in decode_events(body, True) if not e.end_of_period]
    assert [e.sequence for e in catchup] == [2000 + k // 3 for k in range(15)]
    online = json.loads(headers["X-Databus-Checkpoint"])
    online["consumption_mode"] = "ONLINE_CONSUMPTION"
    await write(module_server.endpoint, seg, db_windows(1, 2, first_seq=3000))
    rest, _a, _cp = await stream_all(port, name, checkpoint=json.dumps(online))
    assert [e.sequence for e in rest] == [3000, 3000]
    status, headers, _b = await get(port, "/bootstrap", {"sources": name, "checkPoint": "{}"})
    assert status == 400 and "consumption_mode" in headers["X-Databus-Error-Cause"]


async def test_inspection_endpoints(module_server: ServerProcess) -> None:
    seg = unique_segment()
    port = module_server.http_port
    before_ms = int(time.time() * 1000)
    await write(module_server.endpoint, seg, db_windows(4, 2, first_seq=50))
    name = source_name(seg)
    src = (await _ids(port))[name]
    _s, _h, body = await get(port, "/physicalSources")
    phys = [p for p in json.loads(body) if p["id"] == src]
    assert phys == [{"name": seg, "id": src, "sources": [{"id": src, "name": name}]}]
    _s, _h, body = await get(port, "/physicalBuffers")
    assert json.loads(body)[f"{name}:0"] == [seg]
    status, _h, body = await get(port, f"/bufferInfo/inbound/{name}/0")
    info = json.loads(body)
    assert status == 200 and info["minScn"] == 50 and info["maxScn"] == 53
    assert info["timestampFirstEvent"] == 0  # the events carry timestamp_ns=seq: 0 ms
    status, _h, _b = await get(port, f"/bufferInfo/inbound/{name}/3")
    assert status == 404
    raw = unique_segment()
    await write(module_server.endpoint, raw, [b"a", b"b"])
    _s, _h, body = await get(port, f"/bufferInfo/inbound/{source_name(raw)}")
    info = json.loads(body)
    assert info["timestampLatestEvent"] >= before_ms  # indexed-at time for non-Databus
    _e, _a, cp = await stream_all(port, name)
    params = {"sources": name, "timeout": "0", "client": "inspector", "checkPoint": cp}
    await get(port, "/stream", params)
    _s, _h, body = await get(port, "/stats")
    st = json.loads(body)
    assert st["inbound"]["sources"][str(src)]["events"] == 8
    assert st["inbound"]["sources"][str(src)]["maxScn"] == 53
    assert st["inbound"]["events"] >= 8 and st["inbound"]["appends"] >= 1
    assert st["outbound"]["total"]["events"] >= 8
    assert st["outbound"]["clients"]["inspector"]["no_events"] == 1
    assert "inspector" in st["outbound"]["connected"]


async def test_pause_stops_serving_and_shutdown_refuses(module_server: ServerProcess) -> None:
    seg = unique_segment()
    port = module_server.http_port
    name = source_name(seg)
    await write(module_server.endpoint, seg, db_windows(2, 2))
    _s, _h, body = await get(port, "/controlSources/pause", {"sources": name})
    assert json.loads(body) == {"name": name, "status": "paused", "SCN": 101}
    _s, headers, body = await get(port, "/stream", {"sources": name, "timeout": "0"})
    assert headers["X-Databus-Error"] == "no-events" and body == b""
    # a waiting request wakes when the source is unpaused
    waiting = asyncio.ensure_future(get(port, "/stream", {"sources": name, "timeout": "10000"}))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    _s, _h, body = await get(port, "/controlSources/unpause", {"sources": name})
    assert json.loads(body)["status"] == "running"
    _s, headers, body = await asyncio.wait_for(waiting, 5)
    assert len([e for e in decode_events(body, False) if not e.end_of_period]) == 4
    _s, _h, body = await get(port, "/controlSources/shutdown", {"sources": name})
    assert json.loads(body)["status"] == "shutdown"
    status, headers, _b = await get(port, "/stream", {"sources": name, "timeout": "0"})
    assert status == 404 and "shut down" in headers["X-Databus-Error-Cause"]
    _s, _h, body = await get(port, "/controlSources/status", {"sources": name})
    assert json.loads(body)["status"] == "shutdown"
    _s, _h, body = await get(port, "/controlSources/start", {"sources": name})
    assert json.loads(body)["status"] == "running"
    events, _a, _cp = await stream_all(port, name)
    assert len(events) == 4
    status, _h, _b = await get(port, "/controlSources/explode", {"sources": name})
    assert status == 404


async def test_disconnect_clients(module_server: ServerProcess) -> None:
    port = module_server.http_port
    idle = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        await asyncio.sleep(0.2)
        status, _h, body = await get(port, "/relayCommand/disconnectClients")
        assert status == 200 and json.loads(body)["disconnected"] >= 1
        assert await asyncio.to_thread(idle.recv, 1) == b""
    finally:
        idle.close()


def _cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "segmentstore", "relay-schema", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_cli_registers_a_schema(module_server: ServerProcess, tmp_path: Path) -> None:
    seg = unique_segment()
    await write(module_server.endpoint, seg, [b"x"])
    schema_file = tmp_path / "schema.avsc"
    schema_file.write_text('{"type":"record","name":"FromCli"}')
    name = source_name(seg)
    done = await asyncio.to_thread(
        _cli, name, str(schema_file), "--version", "3", "--endpoint", module_server.endpoint
    )
    assert done.returncode == 0, done.stderr
    src = (await _ids(module_server.http_port))[name]
    _s, _h, body = await get(module_server.http_port, "/register", {"sources": str(src)})
    assert json.loads(body) == [{"id": src, "version": 3, "schema": schema_file.read_text()}]
    missing = await asyncio.to_thread(_cli, name, str(tmp_path / "nope"))
    assert missing.returncode == 2 and "cannot read" in missing.stderr
    assert "Traceback" not in missing.stderr
    unreachable = await asyncio.to_thread(
        _cli, name, "-", "--endpoint", "tcp://127.0.0.1:1", stdin="{}"
    )
    assert unreachable.returncode == 3 and len(unreachable.stderr.splitlines()) == 1


async def test_deleted_source_disappears(module_server: ServerProcess) -> None:
    seg = unique_segment()
    port = module_server.http_port
    await write(module_server.endpoint, seg, db_windows(2, 1))
    name = source_name(seg)
    waiting = asyncio.ensure_future(get(port, "/stream", {"sources": name, "timeout": "0"}))
    assert (await waiting)[0] == 200
    async with sc.connect(module_server.endpoint) as client:
        await client.delete(seg)
    status, headers, _b = await get(port, "/stream", {"sources": name, "timeout": "0"})
    assert status == 404 and "unknown source" in headers["X-Databus-Error-Cause"]
    _s, _h, body = await get(port, "/stats")
    assert all(v["name"] != name for v in json.loads(body)["inbound"]["sources"].values())
