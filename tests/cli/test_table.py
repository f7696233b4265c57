"""``segmentstore table ...`` run as a subprocess against a real server."""

from __future__ import annotations

import json
import uuid

from .conftest import CliRunner


def test_table_commands_for_people_and_scripts(cli: CliRunner) -> None:
    t = f"cli/t{uuid.uuid4().hex[:12]}"
    assert cli("table", "create", t).returncode == 0
    r = cli("table", "create", t)
    assert r.returncode == 5 and r.stderr.decode() == f"segmentstore: table {t!r} already exists\n"
    assert cli("table", "create", t, "--exist-ok").returncode == 0
    v_color = int(cli("table", "put", t, "color", "blue").stdout)
    v_size = int(cli("table", "put", t, "size", "L").stdout)
    # conditional updates: a stale version and must-not-exist both fail with code 8
    r = cli("table", "put", t, "size", "XL", "--version", str(v_size + 12345))
    assert r.returncode == 8 and r.stderr.count(b"\n") == 1
    assert cli("table", "put", t, "size", "S", "--must-not-exist").returncode == 8
    r = cli("table", "put", t, "size", "XL", "--version", str(v_size))
    assert r.returncode == 0 and int(r.stdout) != v_size
    v_size = int(r.stdout)

    r = cli("table", "get", t, "color", "size")
    assert r.stdout.decode().splitlines() == ["blue", "XL"]
    r = cli("table", "get", t, "color", "nope", "--json")
    assert r.returncode == 9 and b"has no key 'nope'" in r.stderr
    assert json.loads(r.stdout) == {"key": "color", "value": "blue", "version": v_color}

    r = cli("table", "ls", t)
    header, *rows = r.stdout.decode().splitlines()
    assert header.split() == ["KEY", "VERSION", "VALUE"]
    assert sorted(row.split() for row in rows) == [
        ["color", str(v_color), "blue"],
        ["size", str(v_size), "XL"],
    ]
    r = cli("table", "ls", t, "--json", "--keys-only")
    got = sorted((json.loads(x)["key"], json.loads(x)["version"]) for x in r.stdout.splitlines())
    assert got == [("color", v_color), ("size", v_size)]
    info = json.loads(cli("table", "info", t, "--json").stdout)
    assert info["entries"] == 2 and info["table"] == t and info["key_length"] == 0

    assert cli("table", "rm", t, "color", "--version", str(v_color + 999)).returncode == 8
    assert cli("table", "rm", t, "color").returncode == 0
    assert cli("table", "get", t, "color").returncode == 9
    r = cli("table", "delete", t, "--must-be-empty")
    assert r.returncode == 8 and b"is not empty" in r.stderr
    assert cli("table", "delete", t).returncode == 0
    for args in (("ls", t), ("get", t, "k"), ("put", t, "k", "v"), ("info", t), ("delete", t)):
        r = cli("table", *args)
        assert r.returncode == 4, (args, r.stderr)
        assert r.stderr.decode() == f"segmentstore: table {t!r} does not exist\n"
    assert cli("table", "delete", t, "--missing-ok").returncode == 0
