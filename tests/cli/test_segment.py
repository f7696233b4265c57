"""``segmentstore segment ...`` run as a subprocess against a real server: output for
people and in --json, and the exit code of every error."""

from __future__ import annotations

import contextlib
import json
import queue
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from segmentstore_client import sync
from segmentstore_client.protocol import OLDEST_COMPATIBLE_VERSION, WIRE_VERSION, Hello, encode

from .conftest import CliRunner, cli_env, run_cli


def lines(out: bytes) -> list[str]:
    return out.decode().splitlines()


def test_create_write_cat_info(cli: CliRunner, segment: str) -> None:
    r = cli("segment", "create", segment)
    assert r.returncode == 0 and r.stderr.decode() == f"created {segment}\n"
    r = cli("segment", "write", segment, "hello", "wörld")
    assert r.returncode == 0, r.stderr
    assert r.stderr.decode() == f"wrote 2 events to {segment}\n"
    r = cli("segment", "write", segment, input=b"a\nb\n\x1b[31mred\xff\\\n")
    assert r.returncode == 0, r.stderr
    r = cli("segment", "cat", segment)
    assert r.returncode == 0
    # one line per event; escape sequences and invalid UTF-8 are shown, never sent
    assert lines(r.stdout) == ["hello", "wörld", "a", "b", "\\x1b[31mred\\xff\\\\"]

    r = cli("segment", "cat", segment, "--json")
    events = [json.loads(x) for x in lines(r.stdout)]
    assert [e["offset"] for e in events] == [0, 13, 27, 36, 45]
    assert events[1] == {"offset": 13, "length": 6, "next_offset": 27, "data": "wörld"}
    assert events[4]["data_b64"] == "G1szMW1yZWT/XA=="
    assert all(e["next_offset"] == e["offset"] + 8 + e["length"] for e in events)

    r = cli("segment", "info", segment)
    assert r.returncode == 0
    header, row = lines(r.stdout)
    assert header.split() == ["SEGMENT", "LENGTH", "START", "EVENTS", "SEALED", "MODIFIED"]
    assert row.split()[:5] == [segment, "63", "0", "5", "no"]
    length = list(re.finditer(r"\S+", row))[1]  # the name may hold "63" too
    assert header.index("LENGTH") + len("LENGTH") == length.end()  # right-aligned
    r = cli("segment", "info", segment, "--json")
    info = json.loads(r.stdout)
    assert info["segment"] == segment and info["length"] == 63 and info["events"] == 5
    assert info["sealed"] is False and info["start_offset"] == 0
    assert info["last_modified"].endswith("Z") and info["last_modified_ms"] > 0


def test_cat_from_count_and_positions(cli: CliRunner, segment: str) -> None:
    cli("segment", "create", segment)
    cli("segment", "write", segment, *[f"e{i}" for i in range(10)])
    r = cli("segment", "cat", segment, "--from", "30", "--count", "2", "--offsets")
    assert lines(r.stdout) == ["30\te3", "40\te4"]
    pos = json.dumps({"v": 1, "segment": segment, "offset": 90})
    r = cli("segment", "cat", segment, "--from", pos)
    assert lines(r.stdout) == ["e9"]
    r = cli("segment", "cat", segment, "--from", "end")
    assert r.returncode == 0 and r.stdout == b""
    r = cli("segment", "cat", segment, "--from", json.dumps({"v": 1, "segment": "x", "offset": 0}))
    assert r.returncode == 2 and b"position is for segment 'x'" in r.stderr
    r = cli("segment", "cat", segment, "--from", "31")  # not an event boundary
    assert r.returncode == 12 and len(lines(r.stderr)) == 1
    r = cli("segment", "cat", segment, "--format", "raw", "--delimiter", "\\0", "--count", "3")
    assert r.stdout == b"e0\0e1\0e2\0"
    r = cli("segment", "tail", segment, "-n", "3")
    assert lines(r.stdout) == ["e7", "e8", "e9"]
    r = cli("segment", "tail", segment, "-n", "30", "--json")
    assert [json.loads(x)["data"] for x in lines(r.stdout)] == [f"e{i}" for i in range(10)]


def test_write_from_file_with_delimiter_and_formats(
    cli: CliRunner, segment: str, tmp_path: Path
) -> None:
    cli("segment", "create", segment)
    f = tmp_path / "in.bin"
    f.write_bytes(b"one\0two\nlines\0\0three")
    r = cli("segment", "write", segment, "--file", str(f), "--delimiter", "\\0")
    assert r.returncode == 0 and b"wrote 4 events" in r.stderr
    r = cli("segment", "cat", segment, "--json")
    assert [json.loads(x)["data"] for x in lines(r.stdout)] == ["one", "two\nlines", "", "three"]
    # cat --json output is write --format json input: a copy
    copy = segment + "-copy"
    cli("segment", "create", copy)
    r = cli("segment", "write", copy, "--format", "json", input=r.stdout)
    assert r.returncode == 0, r.stderr
    assert cli("segment", "cat", copy).stdout == cli("segment", "cat", segment).stdout
    r = cli("segment", "write", copy, "--format", "json", input=b'{"nodata": 1}\n')
    assert r.returncode == 12 and b"input line 1: not an event" in r.stderr
    # records: JSON in, record envelopes stored, JSON out
    rec = {"key": "k1", "value": "v1", "headers": {"h": "x"}, "timestamp_ns": 5}
    r = cli("segment", "write", copy, "--format", "records", input=json.dumps(rec).encode())
    assert r.returncode == 0, r.stderr
    r = cli("segment", "cat", copy, "--format", "records", "--from", "end")
    assert r.stdout == b""
    r = cli("segment", "tail", copy, "-n", "1", "--format", "records")
    out = json.loads(r.stdout)
    assert (out["key"], out["value"], out["headers"], out["timestamp_ns"]) == (
        "k1",
        "v1",
        {"h": "x"},
        5,
    )
    r = cli("segment", "cat", copy, "--format", "records")  # the first events are no records
    assert r.returncode == 12 and b"is not a valid record" in r.stderr
    r = cli("segment", "write", copy, "--file", str(tmp_path / "missing"))
    assert r.returncode == 14 and b"missing" in r.stderr


def test_writer_id_writes_exactly_once(cli: CliRunner, segment: str, tmp_path: Path) -> None:
    cli("segment", "create", segment)
    f = tmp_path / "batch.txt"
    f.write_text("a\nb\nc\n")
    r = cli("segment", "write", segment, "--file", str(f), "--writer-id", "loader-1")
    assert r.stderr.decode() == f"wrote 3 events to {segment}\n"
    f.write_text("a\nb\nc\nd\n")  # the rerun after a failure carries one more event
    r = cli("segment", "write", segment, "--file", str(f), "--writer-id", "loader-1")
    assert r.returncode == 0
    assert r.stderr.decode() == f"wrote 1 events to {segment} (3 were there already)\n"
    assert lines(cli("segment", "cat", segment).stdout) == ["a", "b", "c", "d"]
    r = cli("segment", "write", segment, "x", "--first-event-number", "5")
    assert r.returncode == 2 and b"needs --writer-id" in r.stderr


def test_seal_truncate_merge_delete_and_their_errors(cli: CliRunner, segment: str) -> None:
    assert cli("segment", "create", segment).returncode == 0
    r = cli("segment", "create", segment)
    assert (
        r.returncode == 5
        and r.stderr.decode() == f"segmentstore: segment {segment!r} already exists\n"
    )
    assert cli("segment", "create", segment, "--exist-ok").returncode == 0
    cli("segment", "write", segment, "a", "b", "c")
    r = cli("segment", "truncate", segment, "9")
    assert r.returncode == 0
    r = cli("segment", "cat", segment, "--from", "0")
    assert r.returncode == 7 and b"start offset 9" in r.stderr and len(lines(r.stderr)) == 1
    assert lines(cli("segment", "cat", segment).stdout) == ["b", "c"]
    r = cli("segment", "truncate", segment, "1000")
    assert r.returncode == 7
    other = segment + "-2"
    cli("segment", "create", other)
    cli("segment", "write", other, "x", "y")
    assert cli("segment", "truncate", other, "end").returncode == 0
    r = cli("segment", "info", segment, other, "--json")
    infos = [json.loads(x) for x in lines(r.stdout)]
    assert [(i["segment"], i["start_offset"], i["length"]) for i in infos] == [
        (segment, 9, 27),
        (other, 18, 18),
    ]

    src = segment + "#txn"
    cli("segment", "create", src)
    cli("segment", "write", src, "t1")
    cli("segment", "seal", src)
    r = cli("segment", "merge", segment, src)
    assert r.returncode == 0 and r.stdout == b"37\n"
    assert lines(cli("segment", "cat", segment).stdout) == ["b", "c", "t1"]
    assert cli("segment", "info", src).returncode == 4
    assert cli("segment", "merge", segment, segment).returncode == 2

    assert cli("segment", "seal", segment).returncode == 0
    r = cli("segment", "write", segment, "late")
    assert r.returncode == 6 and b"is sealed" in r.stderr and len(lines(r.stderr)) == 1
    info = json.loads(cli("segment", "info", segment, "--json").stdout)
    assert info["sealed"] is True
    # a follower of a sealed segment prints what is there and ends
    r = cli("segment", "tail", "-f", segment, "-n", "1")
    assert r.returncode == 0 and lines(r.stdout) == ["t1"]

    assert cli("segment", "delete", segment).returncode == 0
    for args in (
        ("info", segment),
        ("cat", segment),
        ("tail", segment),
        ("write", segment, "x"),
        ("seal", segment),
        ("delete", segment),
    ):
        r = cli("segment", *args)
        assert r.returncode == 4, (args, r.stderr)
        assert r.stderr.decode() == f"segmentstore: segment {segment!r} does not exist\n"
    r = cli("segment", "delete", segment, "--missing-ok")
    assert r.returncode == 0 and b"did not exist" in r.stderr


def test_connection_errors_and_usage() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    r = run_cli("segment", "info", "x/0", "--endpoint", f"tcp://127.0.0.1:{port}")
    assert r.returncode == 3 and time.monotonic() - t0 < 10
    assert r.stderr.decode().startswith(
        f"segmentstore: could not connect to tcp://127.0.0.1:{port}"
    )
    assert len(lines(r.stderr)) == 1
    # the options work on the group level too
    r = run_cli("segment", "--endpoint", f"tcp://127.0.0.1:{port}", "info", "x/0")
    assert r.returncode == 3
    # the environment variable is the default endpoint
    r = run_cli("segment", "info", "x/0", endpoint=f"tcp://127.0.0.1:{port}")
    assert r.returncode == 3
    # a server that accepts but never answers Hello: a timeout, not a hang
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        ep = f"tcp://127.0.0.1:{silent.getsockname()[1]}"
        t0 = time.monotonic()
        r = run_cli("segment", "info", "x/0", "--endpoint", ep, "--timeout", "0.5")
        assert r.returncode == 3 and b"did not answer Hello" in r.stderr
        assert time.monotonic() - t0 < 10 and len(lines(r.stderr)) == 1
    with mute_server() as ep:  # answers Hello, then nothing
        r = run_cli("segment", "info", "x/0", "--endpoint", ep, "--timeout", "0.5")
        assert r.returncode == 10 and len(lines(r.stderr)) == 1, r.stderr
    r = run_cli("segment", "info", "x/0", "--endpoint", "http://h:1")
    assert r.returncode == 2 and b"bad endpoint" in r.stderr
    r = run_cli("segment", "info", "")
    assert r.returncode == 2 and b"cannot be empty" in r.stderr
    r = run_cli("segment", "bogus")
    assert r.returncode == 2
    # --debug shows the traceback (only then)
    r = run_cli("segment", "info", "x/0", "--endpoint", f"tcp://127.0.0.1:{port}", "--debug")
    assert r.returncode == 3 and b"Traceback" in r.stderr


@contextlib.contextmanager
def mute_server() -> Iterator[str]:
    """A peer that completes the Hello exchange and then never answers a request."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    conns: list[socket.socket] = []

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                conns.append(conn)
                conn.sendall(encode(Hello(WIRE_VERSION, OLDEST_COMPATIBLE_VERSION)))

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"tcp://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()
        for c in conns:
            c.close()


def test_tail_follow_sees_a_new_event_within_a_second(
    module_server: object, cli: CliRunner, segment: str
) -> None:
    endpoint = module_server.endpoint  # type: ignore[attr-defined]
    cli("segment", "create", segment)
    cli("segment", "write", segment, "old")
    proc = subprocess.Popen(
        [sys.executable, "-m", "segmentstore", "segment", "tail", "-f", "-n", "1", segment],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(endpoint),
    )
    got: queue.Queue[bytes] = queue.Queue()
    assert proc.stdout is not None
    threading.Thread(target=lambda: [got.put(x) for x in proc.stdout], daemon=True).start()  # type: ignore[union-attr]
    try:
        assert got.get(timeout=15) == b"old\n"
        with sync.connect(endpoint) as client, client.writer(segment) as w:
            time.sleep(0.3)  # the follower is now parked on the tail
            w.write(b"new").wait(10)
            acked = time.monotonic()
            assert got.get(timeout=5) == b"new\n"
            assert time.monotonic() - acked < 1.0
            client.seal(segment)
        assert proc.wait(10) == 0  # sealing ends the follower
        assert proc.stderr is not None and proc.stderr.read() == f"{segment} is sealed\n".encode()
    finally:
        proc.kill()
        proc.wait()


def test_closed_stdout_ends_quietly(module_server: object, cli: CliRunner, segment: str) -> None:
    endpoint = module_server.endpoint  # type: ignore[attr-defined]
    cli("segment", "create", segment)
    cli("segment", "write", segment, input=b"".join(b"line %d\n" % i for i in range(50_000)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "segmentstore", "segment", "cat", segment],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(endpoint),
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline() == b"line 0\n"
    proc.stdout.close()  # as `| head -1` does
    assert proc.wait(30) == 141
    assert proc.stderr.read() == b""


def test_tail_follow_rides_out_a_server_restart(server_factory: Any) -> None:
    server = server_factory()
    server.start()
    segment = "cli/restart/0"
    assert run_cli("segment", "create", segment, endpoint=server.endpoint).returncode == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "segmentstore", "segment", "tail", "-f", "-n", "1", segment],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(server.endpoint),
    )
    got: queue.Queue[bytes] = queue.Queue()
    assert proc.stdout is not None
    threading.Thread(target=lambda: [got.put(x) for x in proc.stdout], daemon=True).start()  # type: ignore[union-attr]
    try:
        # the follower is connected once it has printed "before" (-n 1: whether it was
        # written before the follower looked or after); a fixed sleep lost the race to a
        # slow interpreter start on a loaded machine: the server was gone before the
        # follower's first connect
        r = run_cli("segment", "write", segment, "before", endpoint=server.endpoint)
        assert r.returncode == 0, r.stderr
        assert got.get(timeout=30) == b"before\n"
        assert server.stop() == 0
        server.restart()  # same data dir and port
        r = run_cli("segment", "write", segment, "after restart", endpoint=server.endpoint)
        assert r.returncode == 0, r.stderr
        assert got.get(timeout=30) == b"after restart\n"
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_list_by_prefix_plain_long_and_json(cli: CliRunner, segment: str) -> None:
    base = segment.rsplit("/", 1)[0]
    names = [f"{base}/b", f"{base}/a", f"{base}x/other"]
    for name in names:
        assert cli("segment", "create", name).returncode == 0
    assert cli("segment", "write", f"{base}/a", "one", "two").returncode == 0
    r = cli("segment", "list", f"{base}/")
    assert r.returncode == 0, r.stderr
    assert lines(r.stdout) == [f"{base}/a", f"{base}/b"]  # sorted; the other prefix left out
    r = cli("segment", "list", f"{base}/", "--json")
    assert [json.loads(x) for x in lines(r.stdout)] == [
        {"segment": f"{base}/a"},
        {"segment": f"{base}/b"},
    ]
    r = cli("segment", "list", f"{base}/", "--long")
    header, first, second = lines(r.stdout)
    assert header.split()[:4] == ["SEGMENT", "LENGTH", "START", "EVENTS"]
    assert first.split()[:4] == [f"{base}/a", "22", "0", "2"]
    assert second.split()[0] == f"{base}/b"
    r = cli("segment", "list", f"{base}-nothing-here/")
    assert r.returncode == 0 and r.stdout == b""
    everything = lines(cli("segment", "list").stdout)
    assert set(names) <= set(everything)
