"""``segment import`` / ``segment export``: a 1 M-event round trip gives the same bytes;
damaged input stops with one line and the events before it written."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from .conftest import CliRunner

_LEN = struct.Struct(">I")


def lp_file(path: Path, payloads: list[bytes]) -> bytes:
    data = b"".join(_LEN.pack(len(p)) + p for p in payloads)
    path.write_bytes(data)
    return data


def test_a_million_events_round_trip(cli: CliRunner, segment: str, tmp_path: Path) -> None:
    payloads = [b"event-%d" % i for i in range(1_000_000)]
    payloads[7] = b""  # an empty event and a binary one travel too
    payloads[8] = bytes(range(256))
    original = lp_file(tmp_path / "in.lp", payloads)
    r = cli("segment", "import", segment, str(tmp_path / "in.lp"), "--create", timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr.decode().startswith("imported 1,000,000 events (")
    assert "events/s" in r.stderr.decode() and "MB/s" in r.stderr.decode()
    r = cli("segment", "export", segment, str(tmp_path / "out.lp"), timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr.decode().startswith("exported 1,000,000 events (")
    assert (tmp_path / "out.lp").read_bytes() == original
    info = json.loads(cli("segment", "info", segment, "--json").stdout)
    assert info["events"] == 1_000_000


def test_jsonl_round_trip_stdout_and_ranges(cli: CliRunner, segment: str, tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text(
        '{"data":"a"}\n\n{"data_b64":"/w=="}\n{"offset":5,"data":"ünï"}\n', encoding="utf-8"
    )
    r = cli("segment", "import", segment, str(src), "--create")
    assert r.returncode == 0 and r.stderr.startswith(b"imported 3 events"), r.stderr
    r = cli("segment", "export", segment, "-", "--format", "jsonl", "-q")
    assert r.returncode == 0 and r.stderr == b""
    got = [json.loads(x) for x in r.stdout.splitlines()]
    assert [g.get("data", g.get("data_b64")) for g in got] == ["a", "/w==", "ünï"]
    assert r.stdout == cli("segment", "cat", segment, "--json").stdout
    r = cli("segment", "export", segment, str(tmp_path / "part.lp"), "--from", "9", "--count", "1")
    assert (tmp_path / "part.lp").read_bytes() == _LEN.pack(1) + b"\xff"


def test_damaged_inputs_stop_with_one_line(cli: CliRunner, segment: str, tmp_path: Path) -> None:
    cli("segment", "create", segment)
    good = lp_file(tmp_path / "x.lp", [b"one", b"two"])
    (tmp_path / "cut.lp").write_bytes(good + _LEN.pack(10) + b"abc")
    r = cli("segment", "import", segment, str(tmp_path / "cut.lp"))
    assert r.returncode == 12
    assert r.stderr.decode() == (
        f"segmentstore: {tmp_path / 'cut.lp'}: the file ends inside the record at byte 14 "
        "(7 bytes of it present)\n"
    )
    assert cli("segment", "cat", segment).stdout == b"one\ntwo\n"  # what came before it
    (tmp_path / "huge.lp").write_bytes(b"\x7f\xff\xff\xff" + b"x" * 100)
    r = cli("segment", "import", segment, str(tmp_path / "huge.lp"))
    assert r.returncode == 12 and b"exceeds the largest event" in r.stderr
    (tmp_path / "bad.jsonl").write_text('{"data":"ok"}\nnot json\n')
    r = cli("segment", "import", segment, str(tmp_path / "bad.jsonl"))
    assert r.returncode == 12 and b"bad.jsonl: line 2: not an event" in r.stderr
    r = cli("segment", "import", segment, str(tmp_path / "nothing.lp"))
    assert r.returncode == 14 and b"nothing.lp" in r.stderr
    r = cli("segment", "import", "cli/missing/0", str(tmp_path / "x.lp"))
    assert r.returncode == 4
    r = cli("segment", "export", segment, str(tmp_path / "no-dir" / "out.lp"))
    assert r.returncode == 14


def test_import_with_writer_id_is_resumable(cli: CliRunner, segment: str, tmp_path: Path) -> None:
    cli("segment", "create", segment)
    lp_file(tmp_path / "a.lp", [b"%d" % i for i in range(1000)])
    lp_file(tmp_path / "b.lp", [b"%d" % i for i in range(1500)])
    for f in ("a.lp", "b.lp", "b.lp"):  # a partial run, then the whole file twice
        r = cli("segment", "import", segment, str(tmp_path / f), "--writer-id", "imp-1")
        assert r.returncode == 0, r.stderr
    out = cli("segment", "cat", segment).stdout.splitlines()
    assert out == [b"%d" % i for i in range(1500)]
