"""updateStream that changes the segment count (the official client's
``update_stream_with_policy``), and ``retentionMax`` enforced by the background retention
(through the SDK's stream admin: the official client always sends "no maximum")."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
import segmentstore_client as sc
from segmentstore_client.controller_proto import controller_pb2 as pb
from segmentstore_client.streams import RetentionPolicy

from .conftest import Ctl, check_events, run_driver, stream_info

pytestmark = pytest.mark.timeout(240)


def _ranges(stub: Any, scope: str, stream: str) -> list[tuple[int, float, float]]:
    reply = stub.getCurrentSegments(stream_info(scope, stream))
    return [(r.segmentId.segmentId, r.minKey, r.maxKey) for r in reply.segmentRanges]


def test_update_stream_scales_to_the_new_segment_count(ctl: Ctl, tmp_path: Path) -> None:
    stub = ctl.stub()
    fixed = "fixed_scaling_policy"
    run_driver("admin", uri=ctl.uri, steps=[
        ["create_scope", "u"],
        ["create_stream_with_policy", "u", "s", [fixed, 2], ["none"], []],
    ])  # fmt: skip
    run_driver("write", uri=ctl.uri, scope="u", stream="s", count=200, keys=8)
    out = run_driver("admin", uri=ctl.uri, steps=[
        ["update_stream_with_policy", "u", "s", [fixed, 5], ["none"], ["t"]],
    ])  # fmt: skip
    assert out == {"update_stream_with_policy:s": True}
    ranges = _ranges(stub, "u", "s")
    assert [(sid >> 32, round(lo, 6), round(hi, 6)) for sid, lo, hi in ranges] == [
        (1, i / 5, (i + 1) / 5) for i in range(5)
    ]  # a new epoch, the key space split evenly
    cfg = stub.getStreamConfiguration(stream_info("u", "s"))
    assert cfg.scalingPolicy.minNumSegments == 5 and list(cfg.tags.tag) == ["t"]
    run_driver("write", uri=ctl.uri, scope="u", stream="s", count=200, keys=8, start=200)
    run_driver("admin", uri=ctl.uri, steps=[
        ["update_stream_with_policy", "u", "s", [fixed, 1], ["none"], []],
    ])  # fmt: skip
    assert [(sid >> 32, lo, hi) for sid, lo, hi in _ranges(stub, "u", "s")] == [(2, 0.0, 1.0)]
    run_driver("write", uri=ctl.uri, scope="u", stream="s", count=200, keys=8, start=400)
    # Same count: no scale (no new epoch).
    run_driver("admin", uri=ctl.uri, steps=[
        ["update_stream_with_policy", "u", "s", [fixed, 1], ["none"], []],
    ])  # fmt: skip
    assert [sid >> 32 for sid, _, _ in _ranges(stub, "u", "s")] == [2]
    # Readers follow 2 -> 5 -> 1 segments: every event once, per-key order kept.
    events = tmp_path / "events.txt"
    r = run_driver(
        "read", uri=ctl.uri, scope="u", stream="s", group="g", count=600, out_file=str(events)
    )
    assert r["read"] == 600
    check_events(events.read_text().splitlines(), keys=8, per_key=75)


def test_update_of_a_by_rate_stream_raises_but_never_lowers_the_count(ctl: Ctl) -> None:
    stub = ctl.stub()
    by_rate = "auto_scaling_policy_by_event_rate"
    run_driver("admin", uri=ctl.uri, steps=[
        ["create_scope", "b"],
        ["create_stream_with_policy", "b", "s", [by_rate, 1000, 2, 1], ["none"], []],
        ["update_stream_with_policy", "b", "s", [by_rate, 1000, 2, 3], ["none"], []],
    ])  # fmt: skip
    assert len(_ranges(stub, "b", "s")) == 3
    run_driver("admin", uri=ctl.uri, steps=[
        ["update_stream_with_policy", "b", "s", [by_rate, 1000, 2, 2], ["none"], []],
    ])  # fmt: skip
    assert len(_ranges(stub, "b", "s")) == 3  # at least minNumSegments: auto-scaling decides
    assert stub.getStreamConfiguration(stream_info("b", "s")).scalingPolicy.minNumSegments == 2


def test_retention_max_below_min_is_refused(ctl: Ctl) -> None:
    stub = ctl.stub()
    stub.createScope(pb.ScopeInfo(scope="m"))
    cfg = pb.StreamConfig(
        streamInfo=stream_info("m", "s"),
        scalingPolicy=pb.ScalingPolicy(minNumSegments=1),
        retentionPolicy=pb.RetentionPolicy(
            retentionType=pb.RetentionPolicy.SIZE, retentionParam=100, retentionMax=50
        ),
    )
    for bad_max in (50, -1):
        cfg.retentionPolicy.retentionMax = bad_max
        with pytest.raises(grpc.RpcError) as e:
            stub.createStream(cfg)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert not stub.checkStreamExists(stream_info("m", "s")).exists


# Retention cuts every 30 s only: within the test, only retentionMax makes cuts happen.
SLOW_CUTS = {
    "SEGMENTSTORE_CONTROLLER_TICK_S": "0.1",
    "SEGMENTSTORE_CONTROLLER_RETENTION_INTERVAL_S": "30",
}


def test_retention_max_keeps_at_most_max_and_at_least_min(ctl_factory: Any) -> None:
    ctl: Ctl = ctl_factory(env=SLOW_CUTS)
    stub = ctl.stub()
    low, high = 10_000, 14_000
    batch = 20 * (100 + 8)  # 20 events of 100 bytes, each framed with 8 bytes

    async def write() -> None:
        async with sc.connect(ctl.server.endpoint, controller=ctl.uri) as client:
            await client.create_scope("r")
            await client.create_stream(
                "r/s", 1, retention=RetentionPolicy.by_size(low, max_size=high)
            )
            async with client.stream_writer("r/s") as w:
                for i in range(12):
                    for j in range(20):
                        await w.write(b"%099d." % (i * 20 + j), routing_key="k")
                    await w.flush()
                    await asyncio.sleep(0.3)  # a few ticks: each batch gets its own cut

    asyncio.run(write())
    total = 12 * batch

    def kept() -> int:
        reply = stub.getSegments(
            pb.GetSegmentsRequest(streamInfo=stream_info("r", "s"), timestamp=0)
        )
        return total - reply.segments[0].offset

    deadline = time.monotonic() + 15
    while kept() > high and time.monotonic() < deadline:
        time.sleep(0.1)
    assert low <= kept() <= high, kept()
    time.sleep(1)  # and it stays there: never below the minimum
    assert low <= kept() <= high, kept()
