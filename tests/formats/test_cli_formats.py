"""Every format on the command line and back: ``segment cat --format kafka|events|databus``
renders each record as JSON, ``export --format <name>-json`` lines read back
(``from_dict``) to the very bytes stored, a Kafka export re-imports with ``import
kafka-log``; and the Databus format works in the SDK (write, read, JSON, columns)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import segmentstore_client as sc
from segmentstore_client import formats
from segmentstore_client.formats import databus, events, kafka

if TYPE_CHECKING:
    from conftest import ServerProcess  # tests/conftest.py


def cli(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "segmentstore", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**_env(), "SEGMENTSTORE_ENDPOINT": server.endpoint},
    )


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("SEGMENTSTORE_")}


def samples() -> dict[str, list[bytes]]:
    """Events of each format with distinct fields (both Databus key kinds and versions,
    a control event, bytes that are not UTF-8; no Databus trace or replication bit:
    Databus's JSON has no field for them)."""
    return {
        "kafka": [
            kafka.encode_message(b"v0", b"k0", timestamp=1_600_000_000_000),
            kafka.encode_message(None, b"\xff\x00", timestamp=7, attributes=0x08),
            kafka.encode_message(b"old", None, magic=0),
        ],
        "events": [
            events.encode_event("ping", b"\xffdata", id=5, namespace="health"),
            events.encode_event("pong", b"", id=6, ref_id=5),
        ],
        "databus": [
            databus.encode(databus.DatabusEvent(11, b"key", b"\xffvalue", src_id=4)),
            databus.encode(
                databus.DatabusEvent(12, 42, b"v", opcode="DELETE", timestamp_ns=5), version=1
            ),
            databus.encode(databus.end_of_period(12)),
        ],
    }


async def store(server: ServerProcess, payloads: list[bytes]) -> str:
    seg = f"formats/cli{uuid.uuid4().hex[:10]}/0"
    async with sc.connect(server.endpoint) as c:
        await c.create_segment(seg)
        async with c.writer(seg) as w:
            await w.write_many(payloads)
    return seg


@pytest.mark.parametrize("name", ["kafka", "events", "databus"])
async def test_cat_and_json_export_read_back(module_server: ServerProcess, name: str) -> None:
    payloads = samples()[name]
    seg = await store(module_server, payloads)
    fmt = formats.get(name)
    r = cli(module_server, "segment", "cat", seg, "--format", name)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(lines) == len(payloads)
    offset = 0
    for line, data in zip(lines, payloads, strict=True):
        assert line.pop("offset") == offset
        want = json.loads(json.dumps(fmt.to_dict(fmt.decode(data))))
        want.pop("offset", None)  # a Kafka message's own offset (0) gives way
        assert line == want
        offset += 8 + len(data)

    r = cli(module_server, "export", seg, "--format", f"{name}-json", "-q")
    assert r.returncode == 0, r.stderr
    back = [fmt.encode_record(fmt.from_dict(json.loads(x))) for x in r.stdout.splitlines()]
    if name == "databus":  # the v1 event comes back as v2 (same fields, other layout)
        assert [databus.decode(b) for b in back] == [databus.decode(b) for b in payloads]
        assert back[0] == payloads[0] and back[2] == payloads[2]
    else:
        assert back == payloads


async def test_cat_of_another_format_is_one_error_line(module_server: ServerProcess) -> None:
    seg = await store(module_server, samples()["events"])
    for name in ("kafka", "databus"):
        r = cli(module_server, "segment", "cat", seg, "--format", name)
        assert r.returncode == 12, r.stderr
        assert r.stderr.count("\n") == 1 and f"not a valid {name} record" in r.stderr


async def test_kafka_export_reimports(module_server: ServerProcess, tmp_path: Path) -> None:
    payloads = samples()["kafka"]
    seg = await store(module_server, payloads)
    out = tmp_path / "exported.log"
    r = cli(module_server, "export", seg, "--format", "kafka", "-o", str(out), "-q")
    assert r.returncode == 0, r.stderr
    again = f"formats/reimport{uuid.uuid4().hex[:10]}/0"
    r = cli(module_server, "import", "kafka-log", str(out), "--segment", again, "-q")
    assert r.returncode == 0, r.stderr
    async with sc.connect(module_server.endpoint) as c:
        assert [e.data async for e in c.reader(again)] == payloads


async def test_databus_in_the_sdk(fclient: sc.Client, fsegment: str) -> None:
    await fclient.create_segment(fsegment)
    async with fclient.writer(fsegment, format="databus") as w:
        await w.write(b"v1", b"k1", sequence=3, timestamp=1_700_000_000_123, src_id=9)
        await w.write(b"v2", 77, sequence=4, version=1)  # type: ignore[arg-type]  # long key
        await w.write_record(databus.end_of_period(4))
    got: list[Any] = [e async for e in fclient.reader(fsegment, format="databus")]
    assert [(e.sequence, e.key, e.value, e.src_id) for e in got[:2]] == [
        (3, b"k1", b"v1", 9),
        (4, 77, b"v2", 1),
    ]
    assert got[0].timestamp_ns == 1_700_000_000_123_000_000 and got[2].end_of_period
    fmt = formats.get("databus")
    for e in got:  # columns and back (Spark's recordFormat) keep every field
        assert fmt.decode(fmt.encode_columns(fmt.columns(e))) == e
    assert fmt.columns(got[1]).key == b"77" and fmt.columns(got[0]).timestamp == 1_700_000_000_123
    with pytest.raises(TypeError, match="needs a key"):
        fmt.encode(b"v")
    with pytest.raises(ValueError, match="no headers"):
        fmt.encode(b"v", b"k", headers={"h": b"1"})
