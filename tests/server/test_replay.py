"""Replay what the official Pravega Python client sent (the vendored byte traces) against the
real server, and check every reply against the one the client accepted in the trace.

The traces were recorded against a fake segment store whose fake controller had created
the segments; here they are created first with CreateSegment. Client frames are sent
byte for byte (except where a server-chosen name must be substituted: the transient
segment of the large-event trace). Replies are matched by request id (DataAppended by
writer and event number) and must be equal field by field, except the wall-clock
``lastModified`` and the random part of transient names. Hello is answered with 17/5
where the fake answered 15/5; the client accepts both.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from protocol.helpers import VECTORS, Frame, load_frames
from segmentstore_client.protocol import (
    Command,
    DataAppended,
    GetStreamSegmentInfo,
    Hello,
    NoSuchSegment,
    SegmentCreated,
    StreamSegmentInfo,
    decode,
    encode,
)

from .wire import WireClient, next_id, parse_events, request_id_of

if TYPE_CHECKING:
    from conftest import ServerProcess  # tests/conftest.py

NAME_FIELDS = ("segment", "segment_name", "target", "source", "parent_segment")

# What each segment holds once the trace has been replayed.
EXPECTED_EVENTS: dict[str, dict[str, list[bytes]]] = {
    "official-client-writer.hex": {"sc/st/0.#epoch.0": [b"event-1", b"event-2", b"event-3"]},
    "official-client-writer-batched.hex": {
        "sx/batch/0.#epoch.0": [b"b0", b"b1", b"b2", b"b3", b"b4", b"b5"]
    },
    "official-client-large-event.hex": {"sx/large/0.#epoch.0": [b"x" * 9437184]},
}


def rename(cmd: Command, names: dict[str, str]) -> Command:
    """``cmd`` with every trace transient name replaced by the server's name for it."""
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(cmd):  # type: ignore[arg-type]
        value = getattr(cmd, f.name)
        if isinstance(value, str) and value in names:
            changes[f.name] = names[value]
    return dataclasses.replace(cmd, **changes) if changes else cmd  # type: ignore[type-var]


def segments_to_create(frames: list[Frame]) -> list[str]:
    """The segments the fake controller had created: every non-transient name the client used."""
    out: list[str] = []
    for f in frames:
        if f.direction != "C>S":
            continue
        cmd = decode(f.data)
        for field in NAME_FIELDS:
            name = getattr(cmd, field, None)
            if isinstance(name, str) and "#transient." not in name and name not in out:
                out.append(name)
    return out


def matches(expected: Command, actual: Command) -> bool:
    if isinstance(expected, DataAppended):
        return (
            isinstance(actual, DataAppended)
            and actual.writer_id == expected.writer_id
            and actual.event_number == expected.event_number
        )
    if isinstance(expected, Hello):
        return isinstance(actual, Hello)
    rid = request_id_of(expected)
    return not isinstance(actual, DataAppended) and rid is not None and request_id_of(actual) == rid


async def replay(path: Path, host: str, port: int) -> dict[str, WireClient]:
    frames = load_frames(path)
    async with await WireClient.connect(host, port) as admin:
        for name in segments_to_create(frames):
            await admin.create_segment(name)
    conns: dict[str, WireClient] = {}
    names: dict[str, str] = {}
    checked = 0
    for f in frames:
        if f.direction == "C>S":
            if f.conn not in conns:
                conns[f.conn] = await WireClient.connect(host, port, hello=False)
            cmd = decode(f.data)
            renamed = rename(cmd, names)
            if renamed is cmd:
                conns[f.conn].send_raw(f.data)  # exactly the client's bytes
            else:
                conns[f.conn].send(renamed)
            continue
        if f.conn not in conns:
            continue  # the tail of an earlier scenario in the same capture
        client = conns[f.conn]
        expected = decode(f.data)
        actual = await client.wait_for(functools.partial(matches, expected), timeout=20)
        where = f"{f.id} {f.name}"
        assert type(actual) is type(expected), f"{where}: got {actual!r}"
        if isinstance(expected, Hello):
            assert actual == Hello(17, 5), where
            assert actual.low_version <= 15 <= actual.high_version  # what the client checks
        elif isinstance(expected, SegmentCreated) and "#transient." in expected.segment:
            # The fake store named it <parent>#transient.<writer id>; the reference (6.4)
            # adds ".<32 random hex>", which is what the server does.
            assert isinstance(actual, SegmentCreated)
            pattern = re.escape(expected.segment) + r"\.[0-9a-f]{32}"
            assert re.fullmatch(pattern, actual.segment), f"{where}: {actual.segment!r}"
            assert actual.request_id == expected.request_id
            names[expected.segment] = actual.segment
        elif isinstance(expected, StreamSegmentInfo):
            assert isinstance(actual, StreamSegmentInfo)
            assert abs(actual.last_modified - time.time() * 1000) < 60_000, where
            assert actual == dataclasses.replace(expected, last_modified=actual.last_modified), (
                where
            )
        else:
            assert actual == rename(expected, names), f"{where}:\n{actual!r}\n!=\n{expected!r}"
            # Replies must also be laid out with every field (the client's decoder is strict).
            assert len(encode(actual)) == len(encode(rename(expected, names))), where
        checked += 1
    assert checked >= 2
    return conns


TRACES = [
    "official-client-writer.hex",
    "official-client-writer-batched.hex",
    "official-client-byte-stream.hex",
    "official-client-large-event.hex",
]


@pytest.mark.parametrize("trace", TRACES)
async def test_replay_official_client_trace(module_server: ServerProcess, trace: str) -> None:
    host, port = module_server.host, module_server.port
    conns = await replay(VECTORS / trace, host, port)
    try:
        async with await WireClient.connect(host, port) as c:
            for segment, events in EXPECTED_EVENTS.get(trace, {}).items():
                assert parse_events(await c.read_all(segment)) == events
            if trace == "official-client-byte-stream.hex":
                info = await c.info("sc/bst/0.#epoch.0")
                assert (info.start_offset, info.write_offset) == (3, 16)
                assert await c.read_all("sc/bst/0.#epoch.0") == b"lo bytes-more"
            if trace == "official-client-large-event.hex":
                # The transient segment was merged away.
                transient = [
                    r.segment
                    for conn in conns.values()
                    for r in conn.of_type(SegmentCreated)
                    if "#transient." in r.segment
                ]
                assert len(transient) == 1
                reply = await c.request(GetStreamSegmentInfo(next_id(), transient[0], ""))
                assert isinstance(reply, NoSuchSegment)
    finally:
        for conn in conns.values():
            assert not conn.is_closed, "the server closed a connection of the official client"
            await conn.close()
