"""Manual scaling through the gRPC API while the official client writes and reads, and the
segment queries that depend on epochs (successors, cuts, truncation)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc
import pytest
import segmentstore_client
from segmentstore_client import SegmentInfo
from segmentstore_client.controller_proto import controller_pb2 as pb

from .conftest import (
    Ctl,
    check_events,
    create_stream,
    finish_driver,
    run_driver,
    start_driver,
    stream_info,
)

pytestmark = pytest.mark.timeout(240)


def _scale(
    stub: object, scope: str, stream: str, sealed: list[int], ranges: list[tuple[float, float]]
) -> object:
    req = pb.ScaleRequest(
        streamInfo=stream_info(scope, stream),
        sealedSegments=sealed,
        newKeyRanges=[pb.ScaleRequest.KeyRangeEntry(start=a, end=b) for a, b in ranges],
        scaleTimestamp=int(time.time() * 1000),
    )
    return stub.scale(req)  # type: ignore[attr-defined]


def _current(stub: object, scope: str, stream: str) -> list[tuple[int, float, float]]:
    reply = stub.getCurrentSegments(stream_info(scope, stream))  # type: ignore[attr-defined]
    return [(r.segmentId.segmentId, r.minKey, r.maxKey) for r in reply.segmentRanges]


def test_scale_during_writes_and_reads_keeps_every_event_once_and_in_order(
    ctl: Ctl, tmp_path: Path
) -> None:
    stub = ctl.stub()
    create_stream(stub, "sc", "st", 2)
    total, keys = 30_000, 12
    events = tmp_path / "events.txt"
    reader = start_driver(
        "read", uri=ctl.uri, scope="sc", stream="st", group="rg", count=total,
        out_file=str(events), seconds=120,
    )  # fmt: skip
    writer = start_driver(
        "write", uri=ctl.uri, scope="sc", stream="st", count=total, keys=keys, inflight=50,
        size=60, pace=[500, 0.05],
    )  # fmt: skip
    time.sleep(1.5)
    assert writer.poll() is None  # the scales below happen while it writes
    # Split segment 0 in two, then merge segment 1 with the upper half: two epochs.
    r1 = _scale(stub, "sc", "st", [0], [(0.0, 0.25), (0.25, 0.5)])
    assert r1.status == pb.ScaleResponse.STARTED and r1.epoch == 1  # type: ignore[attr-defined]
    assert [s[0] for s in _current(stub, "sc", "st")] == [(1 << 32) | 2, (1 << 32) | 3, 1]
    check = stub.checkScale(pb.ScaleStatusRequest(streamInfo=stream_info("sc", "st"), epoch=1))
    assert check.status == pb.ScaleStatusResponse.SUCCESS
    time.sleep(1.0)
    r2 = _scale(stub, "sc", "st", [(1 << 32) | 3, 1], [(0.25, 1.0)])
    assert r2.status == pb.ScaleResponse.STARTED and r2.epoch == 2  # type: ignore[attr-defined]
    assert writer.poll() is None
    w = finish_driver(writer)
    r = finish_driver(reader)
    for name in ("sc/st/0.#epoch.0", "sc/st/2.#epoch.1", "sc/st/4.#epoch.2"):
        assert segment_info(ctl, name).length > 0, name  # every epoch took events
    assert w["written"] == total
    assert r["read"] == total
    check_events(events.read_text().splitlines(), keys=keys, per_key=total // keys)
    # The old segments are sealed; their successors name their predecessors.
    succ = stub.getSegmentsImmediatelyFollowing(
        pb.SegmentId(streamInfo=stream_info("sc", "st"), segmentId=1)
    )
    assert [(e.segment.segmentId.segmentId, sorted(e.value)) for e in succ.segments] == [
        ((2 << 32) | 4, sorted([(1 << 32) | 3, 1]))
    ]


def test_scale_preconditions_and_status_values(ctl: Ctl) -> None:
    stub = ctl.stub()
    create_stream(stub, "p", "s", 2)
    # Gaps, overlaps, unknown segments and empty requests change nothing.
    for sealed, ranges in (
        ([0], [(0.0, 0.2)]),  # leaves a gap
        ([0], [(0.0, 0.6)]),  # overlaps segment 1
        ([7], [(0.0, 0.5)]),  # no such segment
        ([], [(0.0, 0.5)]),
        ([0], []),
        ([0], [(0.3, 0.0), (0.0, 0.5)]),
    ):
        r = _scale(stub, "p", "s", sealed, ranges)
        assert r.status == pb.ScaleResponse.PRECONDITION_FAILED, (sealed, ranges)  # type: ignore[attr-defined]
    assert [s[0] for s in _current(stub, "p", "s")] == [0, 1]
    assert (
        _scale(stub, "p", "nostream", [0], [(0.0, 0.5)]).status
        == pb.ScaleResponse.PRECONDITION_FAILED
    )  # type: ignore[attr-defined]
    bad = stub.checkScale(pb.ScaleStatusRequest(streamInfo=stream_info("p", "s"), epoch=5))
    assert bad.status == pb.ScaleStatusResponse.INVALID_INPUT
    assert stub.isSegmentValid(pb.SegmentId(streamInfo=stream_info("p", "s"), segmentId=1)).response
    _scale(stub, "p", "s", [0, 1], [(0.0, 1.0)])
    assert not stub.isSegmentValid(
        pb.SegmentId(streamInfo=stream_info("p", "s"), segmentId=1)
    ).response
    epoch0 = stub.getEpochSegments(
        pb.GetEpochSegmentsRequest(streamInfo=stream_info("p", "s"), epoch=0)
    )
    assert [r.segmentId.segmentId for r in epoch0.segmentRanges] == [0, 1]
    with pytest.raises(grpc.RpcError) as e:
        stub.getEpochSegments(pb.GetEpochSegmentsRequest(streamInfo=stream_info("p", "s"), epoch=9))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_cuts_between_and_truncation(ctl: Ctl, tmp_path: Path) -> None:
    stub = ctl.stub()
    create_stream(stub, "c", "s", 2)
    run_driver("write", uri=ctl.uri, scope="c", stream="s", count=400, keys=8, size=50)
    info = stream_info("c", "s")
    assert stub.isStreamCutValid(pb.StreamCut(streamInfo=info, cut={0: 0, 1: 0})).response
    assert not stub.isStreamCutValid(pb.StreamCut(streamInfo=info, cut={0: 0})).response
    assert not stub.isStreamCutValid(pb.StreamCut(streamInfo=info, cut={0: 0, 1: -1})).response
    _scale(stub, "c", "s", [0], [(0.0, 0.25), (0.25, 0.5)])
    a, b = (1 << 32) | 2, (1 << 32) | 3
    between = stub.getSegmentsBetween(
        pb.StreamCutRange(streamInfo=info, **{"from": {0: 0, 1: 0}}, to={a: 0, b: 0, 1: 0})
    )
    assert sorted(s.segmentId for s in between.segments) == [0, 1, a, b]
    only_old = stub.getSegmentsBetween(
        pb.StreamCutRange(streamInfo=info, **{"from": {0: 0, 1: 0}}, to={0: 10, 1: 10})
    )
    assert sorted(s.segmentId for s in only_old.segments) == [0, 1]
    # Truncate at the new epoch: segment 0 (wholly before the cut) goes away.
    run_driver("write", uri=ctl.uri, scope="c", stream="s", count=200, keys=8, start=400, size=50)
    seg1_len = segment_info(ctl, "c/s/1.#epoch.0").length
    cut = {a: 0, b: 0, 1: seg1_len // 2}
    assert (
        stub.truncateStream(pb.StreamCut(streamInfo=info, cut=cut)).status
        == pb.UpdateStreamStatus.SUCCESS
    )
    head = stub.getSegments(pb.GetSegmentsRequest(streamInfo=info, timestamp=0))
    assert {s.segmentId.segmentId: s.offset for s in head.segments} == cut
    # Going back behind the head is refused.
    with pytest.raises(grpc.RpcError) as e:
        stub.truncateStream(pb.StreamCut(streamInfo=info, cut={0: 0, 1: 0}))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (
        stub.truncateStream(pb.StreamCut(streamInfo=stream_info("c", "nope"), cut=cut)).status
        == pb.UpdateStreamStatus.STREAM_NOT_FOUND
    )
    # A new reader group starts at the truncation cut.
    events = tmp_path / "after.txt"
    r = run_driver(
        "read",
        uri=ctl.uri,
        scope="c",
        stream="s",
        group="g",
        count=600,
        out_file=str(events),
        seconds=6,
    )
    assert 0 < r["read"] < 600


def segment_info(ctl: Ctl, name: str) -> SegmentInfo:
    """The store's view of one segment, through the project's SDK."""

    async def go() -> SegmentInfo:
        async with segmentstore_client.connect(ctl.server.endpoint) as client:
            return await client.segment_info(name)

    return asyncio.run(go())
