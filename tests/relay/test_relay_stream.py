"""/sources and /stream against a real server, read with a plain HTTP client: checkpoints
resume with no gap and no duplicate, answers hold whole windows, the long poll waits and
wakes, and every error case of the spec answers as documented."""

from __future__ import annotations

import asyncio
import gzip
import json
import time
from typing import TYPE_CHECKING

import pytest
import segmentstore_client as sc
from segmentstore_client.formats import databus
from segmentstore_client.relay import decode_events

from .helpers import db_windows, get, source_name, stream_all, unique_segment, write

if TYPE_CHECKING:
    from conftest import ServerProcess


async def test_sources_v1_and_v2(module_server: ServerProcess) -> None:
    seg = unique_segment()
    await write(module_server.endpoint, seg, [b"x"])
    status, _, body = await get(module_server.http_port, "/sources")
    assert status == 200
    listed = {s["name"]: s["id"] for s in json.loads(body)}
    assert 1 <= listed[source_name(seg)] <= 32767
    status, _, body = await get(module_server.http_port, "/sources", {"v": "2"})
    v2 = {s["name"]: s for s in json.loads(body)["sources"]}
    assert v2[source_name(seg)]["partitions"] == [seg]
    assert v2[source_name(seg)]["id"] == listed[source_name(seg)]
    status, headers, _ = await get(module_server.http_port, "/sources", {"v": "3"})
    assert status == 400 and headers["X-Databus-Error"] == "InvalidRequestParamValueException"


@pytest.mark.parametrize("output", ["binary", "json"])
async def test_databus_windows_resume_without_gap_or_duplicate(
    module_server: ServerProcess, output: str
) -> None:
    seg = unique_segment()
    await write(module_server.endpoint, seg, db_windows(40, 5))
    events, answers, cp = await stream_all(
        module_server.http_port, source_name(seg), size=1500, output=output
    )
    assert [e.key for e in events] == list(range(200))
    assert [e.sequence for e in events] == [100 + k // 5 for k in range(200)]
    assert len(answers) > 5  # the size made it take many answers
    for answer in answers:  # whole windows: every answer ends with a window's marker
        assert answer[-1].end_of_period
        assert sum(1 for e in answer if e.end_of_period) * 5 == len(answer) - sum(
            1 for e in answer if e.end_of_period
        )
    assert json.loads(cp)["windowScn"] == 139


async def test_raw_events_get_derived_scns(module_server: ServerProcess) -> None:
    seg = unique_segment()
    payloads = [b"raw-%d" % i for i in range(30)]
    await write(module_server.endpoint, seg, payloads)
    events, _answers, _cp = await stream_all(module_server.http_port, source_name(seg), size=700)
    assert [e.value for e in events] == payloads
    # SCN = segment offset just past the event's record: 8-byte header + payload
    ends, offset = [], 0
    for p in payloads:
        offset += 8 + len(p)
        ends.append(offset)
    assert [e.sequence for e in events] == ends
    assert [e.key for e in events] == ends
    # a checkpoint in the middle resumes exactly there
    mid = json.dumps({"windowScn": ends[9], "windowOffset": -1})
    rest, _a, _cp = await stream_all(module_server.http_port, source_name(seg), checkpoint=mid)
    assert [e.value for e in rest] == payloads[10:]


async def test_window_larger_than_size_goes_out_in_parts(module_server: ServerProcess) -> None:
    seg = unique_segment()
    await write(module_server.endpoint, seg, db_windows(2, 50))
    events, answers, _cp = await stream_all(module_server.http_port, source_name(seg), size=800)
    assert [e.key for e in events] == list(range(100))
    assert not answers[0][-1].end_of_period  # a mid-window checkpoint was needed


async def test_long_poll_waits_and_wakes(module_server: ServerProcess) -> None:
    seg = unique_segment()
    await write(module_server.endpoint, seg, db_windows(1, 1))
    _e, _a, cp = await stream_all(module_server.http_port, source_name(seg))
    params = {"sources": source_name(seg), "checkPoint": cp, "timeout": "300"}
    started = time.monotonic()
    _status, headers, body = await get(module_server.http_port, "/stream", params)
    assert 0.25 < time.monotonic() - started < 3
    assert headers["X-Databus-Error"] == "no-events" and body == b""
    params["timeout"] = "10000"
    waiting = asyncio.ensure_future(get(module_server.http_port, "/stream", params))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    started = time.monotonic()
    await write(module_server.endpoint, seg, db_windows(1, 2, first_seq=500))
    _status, headers, body = await asyncio.wait_for(waiting, 5)
    assert time.monotonic() - started < 2
    got = decode_events(body, False)
    assert [e.sequence for e in got] == [500, 500, 500] and got[-1].end_of_period


async def test_stream_from_latest_scn_skips_history(module_server: ServerProcess) -> None:
    seg = unique_segment()
    await write(module_server.endpoint, seg, db_windows(3, 1))
    params = {"sources": source_name(seg), "streamFromLatestScn": "true", "timeout": "0"}
    _status, headers, _body = await get(module_server.http_port, "/stream", params)
    assert headers["X-Databus-Error"] == "no-events"
    assert json.loads(headers["X-Databus-Checkpoint"])["windowScn"] == 102


async def test_gzip_on_request(module_server: ServerProcess) -> None:
    seg = unique_segment()
    await write(module_server.endpoint, seg, db_windows(20, 5))
    params = {"sources": source_name(seg), "output": "json", "timeout": "0"}
    plain = await get(
        module_server.http_port, "/stream", params, headers={"Accept-Encoding": "identity"}
    )
    zipped = await get(
        module_server.http_port,
        "/stream",
        params,
        headers={"Accept-Encoding": "gzip"},
        auto_decompress=False,
    )
    assert "Content-Encoding" not in plain[1]
    assert zipped[1]["Content-Encoding"] == "gzip"
    assert len(zipped[2]) < len(plain[2]) / 3
    assert gzip.decompress(zipped[2]) == plain[2]
    # a tiny answer (a tail read's usual one) goes out as it is: no time spent zipping
    small = unique_segment()
    await write(module_server.endpoint, small, [b"x"])
    tiny = await get(
        module_server.http_port,
        "/stream",
        {"sources": source_name(small), "timeout": "0"},
        headers={"Accept-Encoding": "gzip"},
        auto_decompress=False,
    )
    assert tiny[0] == 200 and "Content-Encoding" not in tiny[1]
    assert [e.value for e in decode_events(tiny[2], False) if not e.end_of_period] == [b"x"]


@pytest.mark.parametrize(
    ("params", "status", "cause"),
    [
        ({}, 400, "sources is required"),
        ({"sources": "no.such.source"}, 404, "unknown source"),
        ({"size": "x"}, 400, "size"),
        ({"size": "0"}, 400, "size"),
        ({"output": "xml"}, 400, "output"),
        ({"checkPoint": "{nope"}, 400, "checkPoint"),
        ({"checkPoint": '{"windowScn": "a"}'}, 400, "windowScn"),
        ({"checkPoint": '{"partitions": {"1": [1]}}'}, 400, "partitions"),
        ({"checkPoint": '{"partitions": {"1:0": [1, -1, "x"]}}'}, 400, "partitions"),
        ({"checkPoint": '{"heads": []}'}, 400, "heads"),
        ({"checkPoint": '{"heads": {"1": {"0": -5}}}'}, 400, "heads"),
        ({"checkPoint": '{"heads": {"x": {}}}'}, 400, "heads"),
        ({"filters": "[1]"}, 400, "filters"),
        ({"filters": '{"1": {"partitionType": "HASH", "filters": [{}]}}'}, 400, "partitionType"),
        ({"streamFromLatestScn": "maybe"}, 400, "streamFromLatestScn"),
        ({"timeout": "999999"}, 400, "timeout"),
    ],
)
async def test_bad_parameters(
    module_server: ServerProcess, params: dict[str, str], status: int, cause: str
) -> None:
    seg = unique_segment()
    await write(module_server.endpoint, seg, [b"x"])
    if params and "sources" not in params:
        params = {"sources": source_name(seg), **params}
    got, headers, body = await get(module_server.http_port, "/stream", params)
    assert got == status
    assert headers["X-Databus-Error"] in (
        "InvalidRequestParamValueException",
        "UnknownSourceException",
    )
    assert cause in headers["X-Databus-Error-Cause"]
    assert json.loads(body)["message"] == headers["X-Databus-Error-Cause"]


async def test_checkpoint_too_old_after_truncation(module_server: ServerProcess) -> None:
    seg = unique_segment()
    payloads = [b"event-%03d" % i for i in range(20)]
    await write(module_server.endpoint, seg, payloads)
    record = 8 + len(payloads[0])
    old = json.dumps({"windowScn": record * 2, "windowOffset": -1})  # consumed 2 events
    async with sc.connect(module_server.endpoint) as client:
        await client.truncate(seg, record * 10)
    params = {"sources": source_name(seg), "checkPoint": old, "timeout": "0"}
    status, headers, body = await get(module_server.http_port, "/stream", params)
    assert status == 200 and headers["X-Databus-Error"] == "checkpoint-too-old"
    assert body == b""
    # one that consumed exactly up to the truncation point is not too old
    ok = json.dumps({"windowScn": record * 10, "windowOffset": -1})
    events, _a, _cp = await stream_all(module_server.http_port, source_name(seg), checkpoint=ok)
    assert [e.value for e in events] == payloads[10:]
    # and a flexible checkpoint starts at the oldest event kept
    events, _a, _cp = await stream_all(module_server.http_port, source_name(seg))
    assert [e.value for e in events] == payloads[10:]


async def test_two_sources_in_one_request(module_server: ServerProcess) -> None:
    a, b = unique_segment(), unique_segment()
    await write(module_server.endpoint, a, db_windows(10, 2, src=1))
    await write(module_server.endpoint, b, [b"b-%d" % i for i in range(15)])
    both = f"{source_name(a)},{source_name(b)}"
    events, _answers, cp = await stream_all(module_server.http_port, both, size=600)
    assert sorted(e.key for e in events if e.src_id == 1) == list(range(20))
    assert [e.value for e in events if e.src_id != 1] == [b"b-%d" % i for i in range(15)]
    assert len(json.loads(cp)["partitions"]) == 2


async def test_v1_events_are_served_as_v2(module_server: ServerProcess) -> None:
    seg = unique_segment()
    ev = databus.DatabusEvent(9, b"key", b"value", 3)
    eop = databus.end_of_period(9)
    await write(module_server.endpoint, seg, [databus.encode(x, version=1) for x in (ev, eop)])
    _status, _h, body = await get(
        module_server.http_port, "/stream", {"sources": source_name(seg), "timeout": "0"}
    )
    assert body[0] == databus.V2
    assert decode_events(body, False)[0] == ev
    assert decode_events(body, False)[1].end_of_period


async def test_segment_of_raw_bytes_is_not_served_but_harms_nothing(
    module_server: ServerProcess,
) -> None:
    import uuid

    from segmentstore_client.protocol import block_end
    from server.wire import WireClient, next_id  # tests/server/wire.py

    seg = unique_segment()
    writer = uuid.uuid4()
    async with await WireClient.connect(module_server.host, module_server.port) as wire:
        await wire.create_segment(seg)
        await wire.setup_append(writer, seg)
        garbage = b"\xff\xff\xff\xff not event records at all"
        wire.send(block_end(writer, garbage, 1, 1, next_id()))
        await wire.wait_acked(writer, 1)
    name = source_name(seg)
    status, headers, body = await get(
        module_server.http_port, "/stream", {"sources": name, "timeout": "0"}
    )
    assert status == 200 and headers["X-Databus-Error"] == "no-events" and body == b""
    _s, _h, stats = await get(module_server.http_port, "/stats")
    listed = json.loads(stats)["inbound"]["sources"]
    entry = next(v for v in listed.values() if v["name"] == name)
    assert "no event record at offset 0" in entry["error"]
    other = unique_segment()
    await write(module_server.endpoint, other, [b"fine"])
    events, _a, _cp = await stream_all(module_server.http_port, f"{name},{source_name(other)}")
    assert [e.value for e in events] == [b"fine"]


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc)."""
    import os
    from pathlib import Path

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def test_long_poll_on_a_sealed_segment_does_not_spin(module_server: ServerProcess) -> None:
    """A sealed segment read to its end gets no more data: a long poll on it waits
    without looping (the store answers a wait on a sealed segment at once)."""
    seg = unique_segment()
    await write(module_server.endpoint, seg, db_windows(1, 1))
    async with sc.connect(module_server.endpoint) as client:
        await client.seal(seg)
    _e, _a, cp = await stream_all(module_server.http_port, source_name(seg))
    params = {"sources": source_name(seg), "checkPoint": cp, "timeout": "1500"}
    cpu = _cpu_seconds(module_server.pid)
    started = time.monotonic()
    _status, headers, _body = await get(module_server.http_port, "/stream", params)
    assert time.monotonic() - started >= 1.4
    assert headers["X-Databus-Error"] == "no-events"
    assert _cpu_seconds(module_server.pid) - cpu < 0.15  # a spin burns what it can get
