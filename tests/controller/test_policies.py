"""Retention (by size, by time) and auto-scaling (by event rate) with short measurement
windows, controller metrics, and metadata surviving restarts."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from segmentstore_client.controller_proto import controller_pb2 as pb

from .conftest import Ctl, check_events, finish_driver, run_driver, start_driver, stream_info

pytestmark = pytest.mark.timeout(240)

FAST = {
    "SEGMENTSTORE_CONTROLLER_TICK_S": "0.2",
    "SEGMENTSTORE_CONTROLLER_RETENTION_INTERVAL_S": "0.5",
    "SEGMENTSTORE_CONTROLLER_RATE_WINDOW_S": "2",
    "SEGMENTSTORE_CONTROLLER_SCALE_COOLDOWN_S": "2",
}


def _head(stub: Any, scope: str, stream: str) -> dict[int, int]:
    reply = stub.getSegments(
        pb.GetSegmentsRequest(streamInfo=stream_info(scope, stream), timestamp=0)
    )
    return {s.segmentId.segmentId: s.offset for s in reply.segments}


def _segment_count(stub: Any, scope: str, stream: str) -> int:
    return len(stub.getCurrentSegments(stream_info(scope, stream)).segmentRanges)


def _wait(cond: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return False


def test_retention_by_size_keeps_at_least_the_limit(ctl_factory: Any) -> None:
    ctl: Ctl = ctl_factory(env=FAST)
    stub = ctl.stub()
    limit = 20_000
    run_driver("admin", uri=ctl.uri, steps=[
        ["create_scope", "r"],
        ["create_stream_with_policy", "r", "s", ["fixed_scaling_policy", 1], ["by_size", limit], []],
    ])  # fmt: skip
    batch = 200 * (100 + 8)  # 200 events of 100 bytes, each framed with 8 bytes
    for i in range(3):
        run_driver(
            "write", uri=ctl.uri, scope="r", stream="s", count=200, keys=1, size=100, start=200 * i
        )
        time.sleep(1.2)  # a retention cut is taken after each batch
    assert _wait(lambda: _head(stub, "r", "s")[0] > 0, 10)
    head = _head(stub, "r", "s")[0]
    kept = 3 * batch - head
    assert limit <= kept <= limit + batch, (head, kept)


def test_retention_by_time_drops_old_data(ctl_factory: Any, tmp_path: Path) -> None:
    ctl: Ctl = ctl_factory(env=FAST)
    stub = ctl.stub()
    run_driver("admin", uri=ctl.uri, steps=[
        ["create_scope", "t"],
        ["create_stream_with_policy", "t", "s", ["fixed_scaling_policy", 2], ["by_time", 1000], []],
    ])  # fmt: skip
    run_driver("write", uri=ctl.uri, scope="t", stream="s", count=100, keys=4, size=50)
    assert _wait(lambda: sum(_head(stub, "t", "s").values()) > 0, 15)
    # A reader group made now starts after the dropped events.
    out = tmp_path / "after.txt"
    r = run_driver(
        "read",
        uri=ctl.uri,
        scope="t",
        stream="s",
        group="g",
        count=100,
        out_file=str(out),
        seconds=4,
    )
    assert r["read"] < 100
    check_events(out.read_text().splitlines(), keys=4)


def test_auto_scaling_splits_under_load_and_merges_back(ctl_factory: Any) -> None:
    ctl: Ctl = ctl_factory(env=FAST)
    stub = ctl.stub()
    run_driver("admin", uri=ctl.uri, steps=[
        ["create_scope", "a"],
        ["create_stream_with_policy", "a", "s", ["auto_scaling_policy_by_event_rate", 20, 2, 1], ["none"], []],
    ])  # fmt: skip
    assert _segment_count(stub, "a", "s") == 1
    # About 100 events/s, five times the target rate, for up to 20 s.
    writer = start_driver(
        "write", uri=ctl.uri, scope="a", stream="s", count=2000, keys=16, pace=[10, 0.1]
    )
    t0 = time.monotonic()
    assert _wait(lambda: _segment_count(stub, "a", "s") >= 2, 30), "no split under load"
    split_after = time.monotonic() - t0
    assert split_after < 60
    writer.kill()
    writer.wait(10)
    assert _wait(lambda: _segment_count(stub, "a", "s") == 1, 60), "no merge after the load"
    epochs = 0
    while True:
        try:
            stub.getEpochSegments(
                pb.GetEpochSegmentsRequest(streamInfo=stream_info("a", "s"), epoch=epochs)
            )
        except Exception:
            break
        epochs += 1
    assert epochs >= 3  # split, then merged back


def test_metadata_survives_sigterm_and_kill_9_and_metrics_count_rpcs(
    ctl_factory: Any, tmp_path: Path
) -> None:
    ctl: Ctl = ctl_factory()
    run_driver("admin", uri=ctl.uri, steps=[["create_scope", "d"], ["create_stream", "d", "s", 3]])
    run_driver("write", uri=ctl.uri, scope="d", stream="s", count=300, keys=3)
    body = (
        urllib.request.urlopen(f"http://127.0.0.1:{ctl.server.http_port}/metrics", timeout=10)
        .read()
        .decode()
    )
    assert 'segmentstore_controller_rpcs_total{method="createStream",status="SUCCESS"} 1.0' in body
    assert 'segmentstore_controller_stream_segments{stream="d/s"} 3.0' in body
    assert "segmentstore_controller_streams 1.0" in body
    # The server's handling time per method: one createStream observed, within 5 s.
    assert 'segmentstore_controller_rpc_seconds_count{method="createStream"} 1.0' in body
    assert 'segmentstore_controller_rpc_seconds_bucket{le="5.0",method="createStream"} 1.0' in body
    assert ctl.server.stop() == 0
    ctl.restart()
    ctl.server.kill()
    ctl.restart()
    out = run_driver(
        "admin",
        uri=ctl.uri,
        steps=[["list_scope"], ["list_stream", "d"], ["create_stream", "d", "s", 3]],
    )
    assert out == {"list_scope:": ["d"], "list_stream:d": ["s"], "create_stream:d:s:3": False}
    events = tmp_path / "e.txt"
    r = run_driver(
        "read", uri=ctl.uri, scope="d", stream="s", group="g", count=300, out_file=str(events)
    )
    assert r["read"] == 300
    finish = start_driver("write", uri=ctl.uri, scope="d", stream="s", count=10, keys=1, start=300)
    assert finish_driver(finish)["written"] == 10
