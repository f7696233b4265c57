"""Server-side RANGE and MOD filters: four consumers with MOD buckets 0..3 of 4 (or four
key ranges) see every key exactly once between them; a filter that drops everything
still moves the checkpoint; string keys bucket by CRC-32."""

from __future__ import annotations

import json
import zlib
from typing import TYPE_CHECKING

from segmentstore_client.formats import databus

from .helpers import db_windows, get, source_name, stream_all, unique_segment, write

if TYPE_CHECKING:
    from conftest import ServerProcess


def mod_filter(src: int, buckets: int, lo: int, hi: int) -> str:
    return json.dumps(
        {
            str(src): {
                "partitionType": "MOD",
                "filters": [{"numBuckets": buckets, "bktRange": {"start": lo, "end": hi}}],
            }
        }
    )


def range_filter(src: int, lo: int, hi: int) -> str:
    return json.dumps(
        {
            str(src): {
                "partitionType": "RANGE",
                "filters": [{"keyRange": {"start": lo, "end": str(hi)}}],
            }
        }
    )


async def _source_id(port: int, seg: str) -> int:
    _s, _h, body = await get(port, "/sources")
    return next(s["id"] for s in json.loads(body) if s["name"] == source_name(seg))


async def test_mod_buckets_partition_the_keys(module_server: ServerProcess) -> None:
    seg = unique_segment()
    await write(module_server.endpoint, seg, db_windows(50, 8))  # keys 0..399
    src = await _source_id(module_server.http_port, seg)
    seen: list[int] = []
    for bucket in range(4):
        events, _a, _cp = await stream_all(
            module_server.http_port,
            source_name(seg),
            size=2000,
            filters=mod_filter(src, 4, bucket, bucket),
        )
        keys = [int(e.key) for e in events]  # type: ignore[arg-type]
        assert keys and all(k % 4 == bucket for k in keys)
        seen.extend(keys)
    assert sorted(seen) == list(range(400))


async def test_range_filters_partition_the_keys(module_server: ServerProcess) -> None:
    seg = unique_segment()
    await write(module_server.endpoint, seg, db_windows(25, 8))  # keys 0..199
    src = await _source_id(module_server.http_port, seg)
    seen: list[int] = []
    for lo, hi in ((0, 49), (50, 99), (100, 149), (150, 199)):
        events, _a, _cp = await stream_all(
            module_server.http_port, source_name(seg), filters=range_filter(src, lo, hi)
        )
        keys = [int(e.key) for e in events]  # type: ignore[arg-type]
        assert keys == list(range(lo, hi + 1))  # inclusive at both ends, in order
        seen.extend(keys)
    assert sorted(seen) == list(range(200))


async def test_filter_dropping_everything_still_advances(module_server: ServerProcess) -> None:
    seg = unique_segment()
    await write(module_server.endpoint, seg, db_windows(10, 3))
    src = await _source_id(module_server.http_port, seg)
    params = {
        "sources": source_name(seg),
        "filters": range_filter(src, 10_000, 20_000),
        "timeout": "0",
    }
    status, headers, body = await get(module_server.http_port, "/stream", params)
    assert status == 200 and "X-Databus-Error" not in headers
    events = [e for e in _decode(body) if not e.end_of_period]
    assert events == []
    assert json.loads(headers["X-Databus-Checkpoint"])["windowScn"] == 109
    params["checkPoint"] = headers["X-Databus-Checkpoint"]
    _s, headers, body = await get(module_server.http_port, "/stream", params)
    assert headers["X-Databus-Error"] == "no-events"


async def test_mod_on_string_keys_uses_crc32(module_server: ServerProcess) -> None:
    seg = unique_segment()
    keys = [b"user-%d" % i for i in range(60)]
    payloads = [databus.encode(databus.DatabusEvent(1 + i, k, b"v")) for i, k in enumerate(keys)]
    payloads.append(databus.encode(databus.end_of_period(61)))
    await write(module_server.endpoint, seg, payloads)
    src = await _source_id(module_server.http_port, seg)
    got: list[bytes] = []
    for bucket in range(3):
        events, _a, _cp = await stream_all(
            module_server.http_port, source_name(seg), filters=mod_filter(src, 3, bucket, bucket)
        )
        got.extend(bytes(e.key) for e in events)  # type: ignore[arg-type]
        assert all(zlib.crc32(bytes(e.key)) % 3 == bucket for e in events)  # type: ignore[arg-type]
    assert sorted(got) == sorted(keys)


async def test_spec_style_bare_keys_and_bad_ranges(module_server: ServerProcess) -> None:
    seg = unique_segment()
    await write(module_server.endpoint, seg, db_windows(2, 4))
    src = await _source_id(module_server.http_port, seg)
    spec_text = (
        f'{{"{src}":{{filters:[{{"numBuckets":2,"bktRange":{{"end":"0","start":0}}}}],'
        '"partitionType":"MOD"}}'
    )
    events, _a, _cp = await stream_all(module_server.http_port, source_name(seg), filters=spec_text)
    assert [e.key for e in events] == [0, 2, 4, 6]
    for bad in (mod_filter(src, 4, 3, 5), mod_filter(src, 0, 0, 0), range_filter(src, 5, 1)):
        status, headers, _b = await get(
            module_server.http_port, "/stream", {"sources": source_name(seg), "filters": bad}
        )
        assert status == 400 and "filters" in headers["X-Databus-Error-Cause"]


def _decode(body: bytes) -> list[databus.DatabusEvent]:
    from segmentstore_client.relay import decode_events

    return decode_events(body, False)
