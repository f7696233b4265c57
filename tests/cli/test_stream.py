"""``segmentstore scope ...`` and ``segmentstore stream ...`` run as subprocesses against a
real server with its controller (``--controller-port 0``)."""

from __future__ import annotations

import contextlib
import io
import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from controller.conftest import controller_uri  # tests/controller/conftest.py
from segmentstore_client.streams import StreamCut, key_hash

from segmentstore import cli
from segmentstore.server.launcher import ServerProcess

from .conftest import cli_env, run_cli


@pytest.fixture(scope="module")
def ctl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    s = ServerProcess(tmp_path_factory.mktemp("stream-cli"), ["--controller-port", "0"])
    s.start()
    yield s
    s.kill()


class Cli:
    """The CLI with SEGMENTSTORE_ENDPOINT and SEGMENTSTORE_CONTROLLER set, run in this
    process (``cli.main``: a subprocess costs 1-2 s on a loaded CI machine, and these
    tests run ~50 commands); the tests of ``tail -f``, stdin and tracebacks use
    subprocesses (``run_cli``)."""

    def __init__(self, server: ServerProcess, monkeypatch: pytest.MonkeyPatch) -> None:
        self.endpoint = server.endpoint
        self.controller = controller_uri(server)
        monkeypatch.setenv("SEGMENTSTORE_ENDPOINT", self.endpoint)
        monkeypatch.setenv("SEGMENTSTORE_CONTROLLER", self.controller)

    def kw(self) -> dict[str, str]:
        return {"endpoint": self.endpoint, "controller": self.controller}

    def env(self) -> dict[str, str]:
        return cli_env(self.endpoint, self.controller)

    def __call__(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        out, err = io.TextIOWrapper(io.BytesIO()), io.TextIOWrapper(io.BytesIO())
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(list(args))
            except SystemExit as e:  # argparse's usage errors
                code = int(e.code or 0)
            out.flush()
            err.flush()
        stdout = out.buffer.getvalue()  # type: ignore[attr-defined]
        stderr = err.buffer.getvalue()  # type: ignore[attr-defined]
        assert b"Traceback" not in stderr, stderr.decode()
        return subprocess.CompletedProcess(list(args), code, stdout, stderr)

    def ok(self, *args: str) -> str:
        r = self(*args)
        assert r.returncode == 0, (args, r.stderr.decode())
        return r.stdout.decode()

    def fails(self, code: int, *args: str) -> str:
        r = self(*args)
        assert r.returncode == code, (args, r.returncode, r.stderr.decode())
        assert r.stderr.count(b"\n") == 1, r.stderr  # one line
        return r.stderr.decode()


@pytest.fixture
def sc(ctl_server: ServerProcess, monkeypatch: pytest.MonkeyPatch) -> Cli:
    return Cli(ctl_server, monkeypatch)


def fresh_scope(sc: Cli) -> str:
    scope = f"s{uuid.uuid4().hex[:10]}"
    sc.ok("scope", "create", scope)
    return scope


def test_scope_commands_and_their_exit_codes(sc: Cli) -> None:
    scope = f"s{uuid.uuid4().hex[:10]}"
    sc.fails(4, "scope", "exists", scope)
    sc.ok("scope", "create", scope)
    assert (
        sc.fails(5, "scope", "create", scope) == f"segmentstore: scope {scope!r} already exists\n"
    )
    sc.ok("scope", "create", scope, "--exist-ok")
    sc.ok("scope", "exists", scope)
    assert scope in sc.ok("scope", "list").splitlines()
    assert {"scope": scope} in [
        json.loads(x) for x in sc.ok("scope", "list", "--json").split("\n") if x
    ]
    sc.ok("stream", "create", f"{scope}/a")
    assert "is not empty" in sc.fails(8, "scope", "delete", scope)
    sc.ok("stream", "delete", f"{scope}/a")
    sc.ok("scope", "delete", scope)
    sc.fails(4, "scope", "delete", scope)
    sc.ok("scope", "delete", scope, "--missing-ok")
    r = sc("scope", "create", "a/b")
    assert r.returncode == 2 and b"a scope name has no '/'" in r.stderr


def test_stream_create_options_and_errors(sc: Cli) -> None:
    scope = fresh_scope(sc)
    s = f"{scope}/clicks"
    sc.ok(
        "stream", "create", s, "--by-rate", "events", "--target", "100", "--factor", "2",
        "--min", "3", "--retain-bytes", "1000000", "--tag", "pii", "--tag", "eu",
    )  # fmt: skip
    info = json.loads(sc.ok("stream", "info", s, "--json"))
    assert len(info["epochs"]) == 1 and len(info["epochs"][0]) == 3  # --min 3
    assert sc.fails(5, "stream", "create", s) == f"segmentstore: stream {s!r} already exists\n"
    sc.ok("stream", "create", s, "--exist-ok")
    assert "needs --target" in sc.fails(2, "stream", "create", f"{scope}/x", "--by-rate", "kbytes")
    assert "does not exist" in sc.fails(4, "stream", "create", "nosuchscope/x")
    assert "does not exist" in sc.fails(4, "stream", "info", f"{scope}/nope")
    assert "does not exist" in sc.fails(4, "stream", "list", "nosuchscope")
    # as a subprocess: one line, no traceback, the exit code
    r = run_cli("stream", "info", s, "--controller", "tcp://127.0.0.1:1", endpoint=sc.endpoint)
    assert r.returncode == 3 and b"unreachable" in r.stderr and r.stderr.count(b"\n") == 1
    r = sc("stream", "info", "no-slash")
    assert r.returncode == 2 and b"scope/stream" in r.stderr
    assert sc.ok("stream", "list", scope).split() == [s]
    assert [json.loads(x) for x in sc.ok("stream", "list", scope, "--json").splitlines()] == [
        {"stream": s}
    ]


def _events(out: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.splitlines()]


def test_write_cat_info_cut_scale_truncate_seal_delete(sc: Cli, tmp_path: Path) -> None:
    s = f"{fresh_scope(sc)}/orders"
    sc.ok("stream", "create", s, "--segments", "3")
    # --routing-key: events after the option are events too; one key, one segment, in order
    sc.ok("stream", "write", s, "--routing-key", "user-7", "a1", "a2", "a3")
    lines = tmp_path / "lines.jsonl"
    lines.write_bytes(b'{"user":"u1","n":1}\n{"user":"u2","n":2}\n{"user":"u1","n":3}\n')
    sc.ok("stream", "write", s, "--key-field", "user", "--file", str(lines))
    lines.write_bytes(b'{"n":1}\n')
    bad = sc("stream", "write", s, "--key-field", "user", "--file", str(lines))
    assert bad.returncode == 12 and b"event 1: no field 'user'" in bad.stderr

    info = json.loads(sc.ok("stream", "info", s, "--json"))
    by_id = {seg["segment"]: seg for seg in info["segments"]}
    seg_of = {r["segment"]: (r["low"], r["high"]) for r in info["epochs"][0]}
    assert sum(seg["events"] for seg in info["segments"]) == 6
    # the SDK's routing: each key's events are in the segment whose range holds its hash
    events = _events(sc.ok("stream", "cat", s, "--json"))
    assert len(events) == 6
    for e in events:
        data = str(e["data"])
        key = "user-7" if data.startswith("a") else json.loads(data)["user"]
        low, high = seg_of[int(str(e["segment"]))]
        assert low <= key_hash(key) < high or key_hash(key) == high == 1.0
    a = [e["data"] for e in events if str(e["data"]).startswith("a")]
    assert a == ["a1", "a2", "a3"]
    table = sc.ok("stream", "info", s)
    header = table.splitlines()[1].split()
    assert " ".join(header) == "EPOCH SEGMENT ID KEYS START LENGTH EVENTS SEALED HEAD TAIL"
    cut = StreamCut.from_json(sc.ok("stream", "cut", s))
    assert cut == StreamCut.from_json(json.dumps(info["tail"]))
    assert {k: v["length"] for k, v in by_id.items()} == dict(cut.positions)
    head = StreamCut.from_json(sc.ok("stream", "cut", s, "--head"))
    assert set(head.positions.values()) == {0}

    # one event after the cut in the same segment, then a scale and one in the new epoch
    sc.ok("stream", "write", s, "--routing-key", "user-7", "a4")
    new = [json.loads(x) for x in sc.ok("stream", "scale", s, "2", "--json").splitlines()]
    assert [(r["epoch"], r["low"], r["high"]) for r in new] == [(1, 0.0, 0.5), (1, 0.5, 1.0)]
    assert "give a segment count or --ranges" in sc.fails(2, "stream", "scale", s)
    sc.ok("stream", "write", s, "--routing-key", "user-7", "a5")
    everything = [e["data"] for e in _events(sc.ok("stream", "cat", s, "--json"))]
    assert len(everything) == 8
    assert [x for x in everything if x.startswith("a")] == ["a1", "a2", "a3", "a4", "a5"]
    after = _events(sc.ok("stream", "cat", s, "--json", "--from", cut.to_json()))
    assert [e["data"] for e in after] == ["a4", "a5"]
    (tmp_path / "cut.json").write_text(cut.to_json())
    before = _events(sc.ok("stream", "cat", s, "--json", "--to", f"@{tmp_path / 'cut.json'}"))
    assert sorted(str(e["data"]) for e in before) == sorted(str(e["data"]) for e in events)
    assert sc.ok("stream", "tail", s, "-n", "2") == "a4\na5\n"
    assert "is of stream" in sc.fails(
        2, "stream", "cat", s, "--from", cut.to_json().replace(s, "x/y")
    )
    assert "not a stream cut" in sc.fails(2, "stream", "cat", s, "--from", "{}")

    sc.ok("stream", "truncate", s, cut.to_json())
    assert sc.ok("stream", "cat", s) == "a4\na5\n"
    assert "refused the scale" in sc.fails(8, "stream", "scale", s, "--ranges", "0-0.5,0.5-0.9")
    sc.ok("stream", "seal", s)
    assert "sealed" in sc.fails(6, "stream", "write", s, "late")
    assert json.loads(sc.ok("stream", "info", s, "--json"))["sealed"] is True
    sc.ok("stream", "delete", s)
    sc.fails(4, "stream", "delete", s)
    sc.ok("stream", "delete", s, "--missing-ok")


def test_cat_through_a_reader_group_resumes_where_it_stopped(sc: Cli) -> None:
    s = f"{fresh_scope(sc)}/jobs"
    sc.ok("stream", "create", s, "--segments", "2")
    sc.ok("stream", "write", s, "--routing-key", "k", "j1", "j2", "j3")
    group = ("--group", "workers", "--reader", "r1", "--idle", "0.5")
    assert sc.ok("stream", "cat", s, *group, "--count", "2") == "j1\nj2\n"
    assert sc.ok("stream", "cat", s, *group) == "j3\n"
    assert sc.ok("stream", "cat", s, *group) == ""
    assert "needs --group" in sc.fails(2, "stream", "cat", s, "--reader", "r1")
    assert "not with -f or --group" in sc.fails(2, "stream", "cat", s, "-f", "--to", "-")


def test_tail_follow_sees_a_new_event_within_a_second_and_cleans_up(sc: Cli) -> None:
    scope = fresh_scope(sc)
    s = f"{scope}/live"
    sc.ok("stream", "create", s, "--segments", "2")
    sc.ok("stream", "write", s, "--routing-key", "k", "old")
    proc = subprocess.Popen(
        [sys.executable, "-m", "segmentstore", "stream", "tail", "-f", "-n", "1", s, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=sc.env(),
    )
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())  # the last event before it started
        assert first["data"] == "old"
        time.sleep(0.5)  # the follower's reader group exists by now or very soon
        w = run_cli("stream", "write", s, "--routing-key", "k", **sc.kw(), input=b"new\n")
        assert w.returncode == 0, w.stderr
        written = time.monotonic()
        line = proc.stdout.readline()
        assert json.loads(line)["data"] == "new"
        assert time.monotonic() - written < 1.0 + 0.5  # within a second (+ slack for load)
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 130 and b"Traceback" not in err
    # the temporary reader group went with it
    listed = sc.ok("segment", "list", f"{scope}/_tables/")
    assert "rg.cli-" not in listed
