"""The official Pravega Python client (PyPI ``pravega``) against ``segmentstore serve`` alone:
scopes and streams, routed writes read back through reader groups, tail readers, byte
streams, large events, seal and delete. The client runs in a subprocess (driver.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import Ctl, check_events, finish_driver, run_driver, start_driver, wait_ready

pytestmark = pytest.mark.timeout(240)


def test_write_100k_routed_events_and_read_them_through_a_reader_group(
    ctl: Ctl, tmp_path: Path
) -> None:
    out = run_driver(
        "admin", uri=ctl.uri, steps=[["create_scope", "sc"], ["create_stream", "sc", "st", 4]]
    )
    assert out == {"create_scope:sc": True, "create_stream:sc:st:4": True}
    w = run_driver(
        "write", uri=ctl.uri, scope="sc", stream="st", count=100_000, keys=16, inflight=1000
    )
    assert w["written"] == 100_000
    events = tmp_path / "events.txt"
    r = run_driver(
        "read", uri=ctl.uri, scope="sc", stream="st", group="rg", count=100_000,
        out_file=str(events), seconds=90,
    )  # fmt: skip
    assert r["read"] == 100_000
    seen = check_events(events.read_text().splitlines(), keys=16, per_key=100_000 // 16)
    assert len(seen) == 16


def test_admin_calls_and_their_statuses(ctl: Ctl) -> None:
    steps = [
        ["create_scope", "a"],
        ["create_scope", "a"],  # exists -> False
        ["create_scope", "bad/name"],  # INVALID_SCOPE_NAME -> error
        ["create_stream", "a", "s1", 2],
        ["create_stream", "a", "s1", 2],  # exists -> False
        ["create_stream", "nosuchscope", "s", 1],  # SCOPE_NOT_FOUND -> error
        ["create_stream", "a", "bad_name", 1],  # INVALID_STREAM_NAME -> error
        ["create_stream_with_policy", "a", "s2", ["fixed_scaling_policy", 3], ["by_size", 1 << 20], ["x", "y"]],
        ["get_stream_tags", "a", "s2"],
        ["list_scope"],
        ["list_stream", "a"],
        ["delete_scope", "a"],  # SCOPE_NOT_EMPTY -> error
        ["delete_stream", "a", "s1"],  # STREAM_NOT_SEALED -> error
        ["seal_stream", "a", "s1"],
        ["delete_stream", "a", "s1"],
        ["delete_stream", "a", "s1"],  # not found -> False
        ["seal_stream", "a", "s2"],
        ["delete_stream", "a", "s2"],
        ["delete_scope", "a"],
        ["delete_scope", "a"],  # not found -> False
    ]  # fmt: skip
    out = run_driver("admin", uri=ctl.uri, steps=steps)
    assert out["create_scope:a"] is False  # the second call wins the key; first was True
    assert out["create_scope:bad/name"].startswith("error")
    assert out["create_stream:a:s1:2"] is False
    assert out["create_stream:nosuchscope:s:1"].startswith("error")
    assert out["create_stream:a:bad_name:1"].startswith("error")
    assert out["create_stream_with_policy:s2"] is True
    assert out["get_stream_tags:a:s2"] == ["x", "y"]
    assert out["list_scope:"] == ["a"]
    assert sorted(out["list_stream:a"]) == ["s1", "s2"]
    assert out["seal_stream:a:s1"] is True
    assert out["delete_stream:a:s1"] is False  # the last call on that key: not found
    assert out["delete_stream:a:s2"] is True
    assert out["delete_scope:a"] is False  # the last: not found


def test_tail_reader_sees_only_new_events(ctl: Ctl, tmp_path: Path) -> None:
    run_driver("admin", uri=ctl.uri, steps=[["create_scope", "t"], ["create_stream", "t", "s", 2]])
    run_driver("write", uri=ctl.uri, scope="t", stream="s", count=500, keys=4, inflight=100)
    events = tmp_path / "tail.txt"
    reader = start_driver(
        "read", uri=ctl.uri, scope="t", stream="s", group="tailrg", tail=True, count=300,
        out_file=str(events), seconds=60,
    )  # fmt: skip
    wait_ready(reader)  # the reader group is made at the tail before these are written
    run_driver("write", uri=ctl.uri, scope="t", stream="s", count=300, keys=4, start=500)
    r = finish_driver(reader)
    assert r["read"] == 300
    numbers = [int(n) for line in events.read_text().splitlines() for n in [line.split(":")[1]]]
    assert min(numbers) >= 500 // 4  # nothing from before the group was made


def test_byte_stream_write_read_truncate(ctl: Ctl) -> None:
    run_driver("admin", uri=ctl.uri, steps=[["create_scope", "b"], ["create_stream", "b", "bs", 1]])
    out = run_driver("byte_stream", uri=ctl.uri, scope="b", stream="bs", size=256 * 1024)
    assert out == {"tail": 256 * 1024, "read_ok": True, "head": 1000}


def test_9_mib_event(ctl: Ctl) -> None:
    run_driver("admin", uri=ctl.uri, steps=[["create_scope", "l"], ["create_stream", "l", "s", 1]])
    out = run_driver("big_event", uri=ctl.uri, scope="l", stream="s", group="g", size=9 << 20)
    assert out == {"count": 2, "first_ok": True, "sizes": [9 << 20, 5]}


def test_sealed_stream_refuses_writers(ctl: Ctl, tmp_path: Path) -> None:
    run_driver("admin", uri=ctl.uri, steps=[["create_scope", "z"], ["create_stream", "z", "s", 2]])
    run_driver("write", uri=ctl.uri, scope="z", stream="s", count=100, keys=4)
    assert run_driver("admin", uri=ctl.uri, steps=[["seal_stream", "z", "s"]]) == {
        "seal_stream:z:s": True
    }
    events = tmp_path / "sealed.txt"
    r = run_driver(
        "read", uri=ctl.uri, scope="z", stream="s", group="g", count=100, out_file=str(events)
    )
    assert r["read"] == 100  # a sealed stream stays readable
    with pytest.raises(AssertionError, match="driver write failed"):
        run_driver("write", uri=ctl.uri, scope="z", stream="s", count=1, keys=1, timeout=150)
