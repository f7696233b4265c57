"""The format registry and the SDK's ``format=`` hook, against a real server."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from typing import TYPE_CHECKING

import pytest
import segmentstore_client as sc
from segmentstore_client import formats, records, sync
from segmentstore_client.formats import events, kafka
from segmentstore_client.formats.errors import CrcMismatch, DamagedEvent

if TYPE_CHECKING:
    from conftest import ServerProcess  # tests/conftest.py


def test_importing_the_registry_imports_no_format_module() -> None:
    code = (
        "import json, sys, segmentstore_client, segmentstore_client.formats as f; "
        "print(json.dumps([sorted(sys.modules), f.names()]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded, names = json.loads(out.stdout)
    # formats.events is loaded with the client: Client.events() (the request/reply bus)
    # is typed with its Event class. Every other format waits until it is asked for.
    for module in ("kafka", "databus", "_adapters", "_compression"):
        assert f"segmentstore_client.formats.{module}" not in loaded
    assert "segmentstore_client.formats" in loaded
    assert names == ["databus", "events", "kafka", "records"]


def test_get_by_name_and_by_object() -> None:
    k = formats.get("kafka")
    assert formats.get("kafka") is k and formats.get(k) is k
    with pytest.raises(ValueError, match="unknown format 'avro'; known: databus, events"):
        formats.get("avro")
    with pytest.raises(TypeError, match="not a record format"):
        formats.get(object())  # type: ignore[arg-type]


def test_databus_is_loaded_lazily_by_module_name() -> None:
    try:
        import segmentstore_client.formats.databus  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="databus"):
            formats.get("databus")
    else:
        assert formats.get("databus").name == "databus"


def test_register_a_format() -> None:
    class Upper(formats.RecordFormat):
        name = "upper-test"

        def encode(self, value: bytes | None, key: bytes | None = None, **f: object) -> bytes:
            return (value or b"").upper()

        def decode(self, payload: bytes) -> bytes:
            return payload

        def to_dict(self, record: bytes) -> dict[str, object]:
            return {"value": record.decode()}

    formats.register("upper-test", Upper)
    f = formats.get("upper-test")
    assert f.decode(f.encode(b"abc")) == b"ABC"
    assert json.loads(f.to_json(b"X")) == {"value": "X"}
    assert "upper-test" in formats.names()


@pytest.mark.parametrize("name", ["kafka", "events", "records"])
def test_json_rendering_for_every_format(name: str) -> None:
    f = formats.get(name)
    fields = {"name": "ping", "namespace": "ns"} if name == "events" else {}
    key = None if name == "events" else b"k"
    rec = f.decode(f.encode(b"\xffv", key, **fields))
    d = json.loads(f.to_json(rec))
    value_field = "data" if name == "events" else "value"
    assert d[value_field] == {"base64": "/3Y="}


def test_format_field_errors() -> None:
    with pytest.raises(ValueError, match="no headers"):
        formats.get("kafka").encode(b"v", headers={"h": b"1"})
    with pytest.raises(TypeError, match="unknown Kafka message fields: bogus"):
        formats.get("kafka").encode(b"v", bogus=1)
    with pytest.raises(TypeError, match="needs name"):
        formats.get("events").encode(b"v")
    with pytest.raises(ValueError, match="no key"):
        formats.get("events").encode(b"v", b"k", name="n")


async def test_writer_and_reader_with_each_format(fclient: sc.Client, fsegment: str) -> None:
    await fclient.create_segment(fsegment)
    async with fclient.writer(fsegment, format="kafka") as w:
        await w.write(b"v1", key=b"k1", timestamp=1000)
        await w.write_record(kafka.Message(None, b"k2", 2000))
        await w.write_many([kafka.Message(b"v%d" % i, timestamp=i) for i in range(3, 6)])
    got = [m async for m in fclient.reader(fsegment, format="kafka")]
    assert [(m.key, m.value, m.timestamp) for m in got] == [
        (b"k1", b"v1", 1000),
        (b"k2", None, 2000),
        (None, b"v3", 3),
        (None, b"v4", 4),
        (None, b"v5", 5),
    ]
    # The stored events are exact Kafka messages.
    raw = [e.data async for e in fclient.reader(fsegment)]
    assert raw[0] == kafka.encode_message(b"v1", b"k1", timestamp=1000)

    seg2 = fsegment + "-events"
    await fclient.create_segment(seg2)
    async with fclient.writer(seg2, format=formats.get("events")) as ew:
        await ew.write(b"payload", name="ping", namespace="health", id=5)
        await ew.write_record(events.Event("pong", b"", id=6, ref_id=5))
    r = fclient.reader(seg2, format="events")
    evs = await r.read_batch()
    assert evs == [
        events.Event("ping", b"payload", 5, None, "health"),
        events.Event("pong", b"", 6, 5, None),
    ]
    assert r.last_event is not None and r.last_event.offset > 0

    seg3 = fsegment + "-records"
    await fclient.create_segment(seg3)
    async with fclient.writer(seg3, format="records") as rw:
        await rw.write(b"val", key=b"key", codec="gzip")
    [rec] = [x async for x in fclient.reader(seg3, format="records")]
    assert isinstance(rec, records.Record) and (rec.key, rec.value) == (b"key", b"val")


async def test_damaged_event_is_a_named_error(fclient: sc.Client, fsegment: str) -> None:
    await fclient.create_segment(fsegment)
    good = kafka.encode_message(b"value", b"key", timestamp=1)
    bad = bytearray(good)
    bad[-1] ^= 0x10
    async with fclient.writer(fsegment) as w:
        await w.write(good)
        await w.write(bytes(bad))
    r = fclient.reader(fsegment, format="kafka")
    assert (await r.__anext__()).value == b"value"
    with pytest.raises(DamagedEvent) as caught:
        await r.__anext__()
    assert isinstance(caught.value.cause, CrcMismatch) and caught.value.offset == 8 + len(good)
    await r.close()


def test_blocking_writer_and_reader_with_a_format(module_server: ServerProcess) -> None:
    name = f"formats/sync{uuid.uuid4().hex[:12]}/0"
    with sync.connect(module_server.endpoint) as client:
        client.create_segment(name)
        with client.writer(name, format="kafka") as w:
            w.write(b"v1", key=b"k1", timestamp=1000)
            w.write_many([kafka.Message(b"v%d" % i, timestamp=i) for i in range(2, 4)])
        with client.reader(name, format="kafka") as r:
            got = [(m.key, m.value, m.timestamp) for m in r]
            assert r.last_event is not None
        assert got == [(b"k1", b"v1", 1000), (None, b"v2", 2), (None, b"v3", 3)]
        raw = client.reader(name).read_batch()
        assert raw[0].data == kafka.encode_message(b"v1", b"k1", timestamp=1000)
