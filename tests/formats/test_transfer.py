"""``segmentstore import kafka-log`` / ``segmentstore export``, run as the command line
against a real server, with a ``.log`` file written by kafka-python."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import segmentstore_client as sc
from segmentstore_client.formats import kafka

if TYPE_CHECKING:
    from conftest import ServerProcess  # tests/conftest.py

legacy = pytest.importorskip("kafka.record.legacy_records")
memory_records = pytest.importorskip("kafka.record.memory_records")


def cli(
    server: ServerProcess | None, *args: str, timeout: str = "5"
) -> subprocess.CompletedProcess[str]:
    endpoint = server.endpoint if server else "tcp://127.0.0.1:1"
    return subprocess.run(
        [sys.executable, "-m", "segmentstore", *args, "--endpoint", endpoint, "--timeout", timeout],
        capture_output=True,
        text=True,
        timeout=120,
    )


def batch(magic: int, codec: int, first: int, n: int, *, size: int = 20) -> bytes:
    """One message set as kafka-python's producer builds it, then placed at ``first`` as
    a 0.10 broker does (only the offset fields change; they are outside every CRC)."""
    b = legacy.LegacyRecordBatchBuilder(magic, codec, 1 << 30)
    for i in range(n):
        key = None if i % 3 == 0 else b"key-%d" % (first + i)
        value = b"%08d" % (first + i) + b"v" * size
        offset = i if codec and magic == 1 else first + i
        b.append(offset, 1_600_000_000_000 + first + i if magic else None, key, value)
    data = bytearray(b.build())
    if codec:  # the wrapper carries the absolute offset of its last inner message
        data[:8] = (first + n - 1).to_bytes(8, "big")
    return bytes(data)


def their_read(data: bytes) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    records = memory_records.MemoryRecords(data)
    while (b := records.next_batch()) is not None:
        out.extend((-1 if r.timestamp is None else r.timestamp, r.key, r.value) for r in b)
    return out


@pytest.fixture
def kafka_log(tmp_path: Path) -> Path:
    parts = [
        batch(0, 0, 0, 5),  # magic 0, plain
        batch(0, 1, 5, 4),  # magic 0, gzip wrapper (absolute inner offsets)
        batch(1, 0, 9, 6),  # magic 1, plain
        batch(1, 1, 15, 5),  # gzip wrapper, relative inner offsets
        batch(1, 2, 20, 5),  # snappy (xerial)
        batch(1, 3, 25, 5),  # lz4
    ]
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"".join(parts))
    return path


def seg() -> str:
    return f"formats/import{uuid.uuid4().hex[:10]}/0"


async def read_back(server: ServerProcess, segment: str) -> list[kafka.Message]:
    async with sc.connect(server.endpoint) as c:
        return [m async for m in c.reader(segment, format="kafka")]


async def test_import_a_kafka_python_log_and_export_it(
    module_server: ServerProcess, kafka_log: Path, tmp_path: Path
) -> None:
    expected = their_read(kafka_log.read_bytes())
    assert len(expected) == 30
    segment = seg()
    r = cli(module_server, "import", "kafka-log", str(kafka_log), "--segment", segment)
    assert r.returncode == 0, r.stderr
    assert f"30 messages from {kafka_log} into {segment}" in r.stderr
    got = await read_back(module_server, segment)
    assert [(m.timestamp, m.key, m.value) for m in got] == expected

    # Running it again writes nothing twice (the writer id comes from the file).
    assert (
        cli(module_server, "import", "kafka-log", str(kafka_log), "--segment", segment).returncode
        == 0
    )
    assert len(await read_back(module_server, segment)) == 30

    out = tmp_path / "exported.log"
    r = cli(
        module_server,
        "export",
        segment,
        "--format",
        "kafka",
        "-o",
        str(out),
        "--base-offset",
        "100",
    )
    assert r.returncode == 0, r.stderr
    data = out.read_bytes()
    assert their_read(data) == expected
    assert [m.offset for m in kafka.decode_message_set(data)] == list(range(100, 130))

    r = cli(module_server, "export", segment, "--format", "kafka-json", "-q")
    assert r.returncode == 0 and r.stderr == ""
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert [(d["timestamp"], d["key"], d["value"]) for d in lines][:2] == [
        (-1, None, "00000000" + "v" * 20),
        (-1, "key-1", "00000001" + "v" * 20),
    ]
    assert lines[9]["magic"] == 1 and lines[9]["timestamp"] == 1_600_000_000_009


async def test_damaged_and_truncated_files(module_server: ServerProcess, kafka_log: Path) -> None:
    data = bytearray(kafka_log.read_bytes())
    first_two = sum(len(batch(0, 0, 0, 5)) for _ in range(1))
    data[first_two + 30] ^= 0x04  # inside the gzip wrapper's message
    kafka_log.write_bytes(bytes(data))
    segment = seg()
    r = cli(module_server, "import", "kafka-log", str(kafka_log), "--segment", segment)
    assert r.returncode == 12
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert "the 5 messages before it were imported" in r.stderr
    assert len(await read_back(module_server, segment)) == 5

    kafka_log.write_bytes(batch(1, 0, 0, 3)[:-7])
    r = cli(module_server, "import", "kafka-log", str(kafka_log), "--segment", seg())
    assert r.returncode == 12 and "ends inside an entry" in r.stderr


async def test_progress_lines_for_large_files(module_server: ServerProcess, tmp_path: Path) -> None:
    path = tmp_path / "big.log"
    path.write_bytes(batch(1, 0, 0, 900, size=10_000))  # ~9 MiB
    r = cli(module_server, "import", "kafka-log", str(path), "--segment", seg())
    assert r.returncode == 0, r.stderr
    assert "(100%), 900 messages" in r.stderr
    r = cli(module_server, "import", "kafka-log", str(path), "--segment", seg(), "-q")
    assert r.returncode == 0 and r.stderr == ""


async def test_errors_are_one_line_with_distinct_codes(
    module_server: ServerProcess, kafka_log: Path
) -> None:
    cases = [
        (cli(None, "import", "kafka-log", str(kafka_log), "--segment", "a/b", timeout="1"), 3),
        (cli(module_server, "import", "kafka-log", "/no/such.log", "--segment", "a/b"), 14),
        (cli(module_server, "import", "kafka-log", str(kafka_log), "--segment", ""), 2),
        (cli(module_server, "export", "formats/none/0", "--format", "kafka", "-o", "/dev/null"), 4),
    ]
    for r, code in cases:
        assert r.returncode == code, r.stderr
        assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    # A segment of plain events is not Kafka data.
    segment = seg()
    async with sc.connect(module_server.endpoint) as c:
        await c.create_segment(segment)
        async with c.writer(segment) as w:
            await w.write(b"not a kafka message")
    r = cli(module_server, "export", segment, "--format", "kafka", "-o", "/dev/null")
    assert r.returncode == 12 and "is not a kafka record" in r.stderr


async def test_export_json_of_events_and_databus(module_server: ServerProcess) -> None:
    from segmentstore_client.formats import events

    segment = seg()
    async with sc.connect(module_server.endpoint) as c:
        await c.create_segment(segment)
        async with c.writer(segment, format="events") as w:
            await w.write(b"payload", name="ping", namespace="health", id=9)
    r = cli(module_server, "export", segment, "--format", "events-json", "-q")
    assert r.returncode == 0, r.stderr
    assert [json.loads(line) for line in r.stdout.splitlines()] == [
        events.Event("ping", b"payload", 9, None, "health").to_dict()
    ]
    empty = seg()
    async with sc.connect(module_server.endpoint) as c:
        await c.create_segment(empty)
    r = cli(module_server, "export", empty, "--format", "databus-json", "-q")
    try:
        import segmentstore_client.formats.databus  # noqa: F401
    except ImportError:
        assert r.returncode == 1 and "the databus format is not available" in r.stderr
    else:
        assert r.returncode == 0 and r.stdout == ""
