"""/bootstrap served from the relay's compacted table (latest event per key), then
catch-up from the log at the table's position: no gap, no duplicate, a key updated
twice appears once; the table is durable across a restart; a stream source bootstraps
with one start position per segment."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import segmentstore_client as sc
from controller.conftest import controller_uri  # tests/controller/conftest.py
from segmentstore_client.formats import databus
from segmentstore_client.relay import decode_events

from .helpers import get, source_name, stream_all, unique_segment, write

if TYPE_CHECKING:
    from conftest import ServerFactory


def upserts(seq: int, pairs: list[tuple[int, bytes]]) -> list[bytes]:
    """One window of Databus events (key, value) with sequence ``seq``, closed."""
    out = [databus.encode(databus.DatabusEvent(seq, k, v, 7)) for k, v in pairs]
    return [*out, databus.encode(databus.end_of_period(seq))]


async def bootstrap(
    port: int, name: str, output: str = "binary"
) -> tuple[list[databus.DatabusEvent], dict[str, object], dict[str, object]]:
    """startSCN, every snapshot page, then catch-up to targetSCN: (events in order, the
    snapshot checkpoint, the online checkpoint)."""
    status, headers, body = await get(port, "/startSCN", {"sources": name, "checkPoint": "{}"})
    assert status == 200, body
    cp = headers["X-Databus-Checkpoint"]
    start = json.loads(cp)
    assert start["consumption_mode"] == "BOOTSTRAP_SNAPSHOT"
    assert start["bootstrap_start_scn"] == int(json.loads(body))
    events: list[databus.DatabusEvent] = []
    for _ in range(200):
        params = {"sources": name, "checkPoint": cp, "batchSize": "300", "output": output}
        status, headers, body = await get(port, "/bootstrap", params)
        assert status == 200, body
        events += [e for e in decode_events(body, output == "json") if not e.end_of_period]
        cp = headers["X-Databus-Checkpoint"]
        if headers["PhaseCompleted"] == "TRUE":
            break
    else:
        raise AssertionError("the snapshot did not complete")
    _s, _h, body = await get(port, "/targetSCN", {"source": name})
    obj = json.loads(cp)
    obj.update(consumption_mode="BOOTSTRAP_CATCHUP", bootstrap_target_scn=int(json.loads(body)))
    for _ in range(200):
        params = {"sources": name, "checkPoint": json.dumps(obj), "batchSize": "300"}
        status, headers, body = await get(port, "/bootstrap", params)
        assert status == 200, body
        events += [e for e in decode_events(body, False) if not e.end_of_period]
        obj = json.loads(headers["X-Databus-Checkpoint"])
        if headers["PhaseCompleted"] == "TRUE":
            break
    else:
        raise AssertionError("the catch-up did not complete")
    obj["consumption_mode"] = "ONLINE_CONSUMPTION"
    return events, start, obj


async def test_snapshot_is_latest_per_key_then_catchup_then_stream(
    server_factory: ServerFactory,
) -> None:
    srv = server_factory()
    srv.start()
    seg = unique_segment()
    name = source_name(seg)
    await write(srv.endpoint, seg, upserts(10, [(k, b"v1-%d" % k) for k in range(30)]))
    await write(srv.endpoint, seg, upserts(11, [(k, b"v2-%d" % k) for k in range(0, 30, 3)]))
    await write(srv.endpoint, seg, upserts(12, [(5, b"v3-5"), (40, b"v1-40")]))
    events, start, online = await bootstrap(srv.http_port, name, "json")
    assert start["bootstrap_start_scn"] == 12
    latest = {k: b"v1-%d" % k for k in range(30)}
    latest.update({k: b"v2-%d" % k for k in range(0, 30, 3)})
    latest.update({5: b"v3-5", 40: b"v1-40"})
    assert [e.key for e in events] == sorted(latest)  # each key once, in key order
    assert {e.key: e.value for e in events} == latest
    # events written after startSCN come in catch-up, once, even after a newer startSCN
    # moved the table past them
    await write(srv.endpoint, seg, upserts(20, [(1, b"v4-1"), (50, b"v1-50")]))
    _s, headers, _b = await get(srv.http_port, "/startSCN", {"sources": name})
    cp = json.loads(headers["X-Databus-Checkpoint"])
    first_cp = json.dumps({**cp, "partitions": start["partitions"], "bootstrap_start_scn": 12})
    snap: list[databus.DatabusEvent] = []
    params = {"sources": name, "checkPoint": first_cp, "batchSize": "100000"}
    _s, headers, body = await get(srv.http_port, "/bootstrap", params)
    snap = [e for e in decode_events(body, False) if not e.end_of_period]
    assert headers["PhaseCompleted"] == "TRUE"
    assert {e.key for e in snap} == set(latest) - {1}  # key 1 moved past 12: catch-up's
    # online streaming resumes after the catch-up: nothing twice, nothing lost
    rest, _a, _cp = await stream_all(srv.http_port, name, checkpoint=json.dumps(online))
    assert [(e.key, e.value) for e in rest] == [(1, b"v4-1"), (50, b"v1-50")]
    # the table and its position are durable: after a restart the snapshot is the same
    srv.stop()
    srv.restart()
    again, start2, _online = await bootstrap(srv.http_port, name)
    assert start2["bootstrap_start_scn"] == 20
    latest.update({1: b"v4-1", 50: b"v1-50"})
    assert {e.key: e.value for e in again} == latest and len(again) == len(latest)


async def test_filters_apply_to_the_snapshot(server_factory: ServerFactory) -> None:
    srv = server_factory()
    srv.start()
    seg = unique_segment()
    name = source_name(seg)
    await write(srv.endpoint, seg, upserts(3, [(k, b"x") for k in range(40)]))
    huge = databus.DatabusEvent(4, b"k" * 9000, b"too long a key for a table", 7)
    closed = [databus.encode(huge), databus.encode(databus.end_of_period(4))]
    await write(srv.endpoint, seg, closed)  # left out of the table, no error
    status, headers, body = await get(srv.http_port, "/startSCN", {"sources": name})
    assert status == 200 and json.loads(body) == "4"
    mod = json.dumps({"filters": [{"numBuckets": 4, "bktRange": {"start": 1, "end": 1}}],
                      "partitionType": "MOD"})  # fmt: skip
    params = {"sources": name, "checkPoint": headers["X-Databus-Checkpoint"], "filter": mod}
    _s, headers, body = await get(srv.http_port, "/bootstrap", params)
    keys = [e.key for e in decode_events(body, False) if not e.end_of_period]
    assert keys == [k for k in range(40) if k % 4 == 1]
    bad = json.loads(headers["X-Databus-Checkpoint"])
    bad["snapshot_offset"] = "zz"
    params["checkPoint"] = json.dumps(bad)
    status, headers, _b = await get(srv.http_port, "/bootstrap", params)
    assert status == 400 and "snapshot_offset" in headers["X-Databus-Error-Cause"]


async def test_stream_source_bootstrap(server_factory: ServerFactory) -> None:
    srv = server_factory(extra_args=["--controller-port", "0"])
    srv.start()
    async with sc.connect(srv.endpoint, controller=controller_uri(srv)) as client:
        await client.create_scope("bs")
        await client.create_stream("bs/s", 2)
        async with client.stream_writer("bs/s") as w:
            await w.write_many([b"a:%d" % i for i in range(20)], routing_keys=["a"] * 20)
            await w.write_many([b"b:%d" % i for i in range(20)], routing_keys=["b"] * 20)
        await client.scale_stream("bs/s", 3)
        async with client.stream_writer("bs/s") as w:
            await w.write_many([b"c:%d" % i for i in range(10)], routing_keys=["c"] * 10)
        events, start, online = await bootstrap(srv.http_port, "bs.s")
        assert len(start["partitions"]) == 5  # a position for every segment
        # raw events have no key of their own: every event is its own row, each once
        assert sorted(e.value for e in events) == sorted(
            [b"a:%d" % i for i in range(20)]
            + [b"b:%d" % i for i in range(20)]
            + [b"c:%d" % i for i in range(10)]
        )
        async with client.stream_writer("bs/s") as w:
            await w.write(b"d:0", routing_key="d")
        rest, _a, _cp = await stream_all(srv.http_port, "bs.s", checkpoint=json.dumps(online))
        assert [e.value for e in rest] == [b"d:0"]


async def test_catchup_errors_the_spec_names(server_factory: ServerFactory) -> None:
    """A snapshot ahead of its target: 400; a client past the target (the spec's
    BootstrapTooOldException): 503, retriable with a newer /targetSCN."""
    srv = server_factory()
    srv.start()
    seg = unique_segment()
    await write(srv.endpoint, seg, upserts(10, [(1, b"a")]))
    base = {"consumption_mode": "BOOTSTRAP_CATCHUP", "catchup_source": source_name(seg)}
    cases = [
        ({"bootstrap_start_scn": 11, "bootstrap_target_scn": 10}, 400, "above"),
        (
            {"bootstrap_start_scn": 5, "bootstrap_since_scn": 12, "bootstrap_target_scn": 10},
            503,
            "ask /targetSCN again",
        ),
        ({"bootstrap_start_scn": "x", "bootstrap_target_scn": 10}, 400, "must be an integer"),
    ]
    for fields, status, cause in cases:
        params = {"checkPoint": json.dumps({**base, **fields})}
        got, headers, _body = await get(srv.http_port, "/bootstrap", params)
        assert got == status, (fields, got)
        assert cause in headers["X-Databus-Error-Cause"]
    _g, headers, _b = await get(
        srv.http_port, "/bootstrap", {"checkPoint": json.dumps({**base, **cases[1][0]})}
    )
    assert headers["X-Databus-Error"] == "BootstrapTooOldException"
    ok = {**base, "bootstrap_start_scn": 5, "bootstrap_since_scn": 5, "bootstrap_target_scn": 10}
    got, headers, _body = await get(srv.http_port, "/bootstrap", {"checkPoint": json.dumps(ok)})
    assert got == 200 and headers["PhaseCompleted"] == "TRUE"
