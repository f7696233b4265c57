"""The gRPC API directly (grpcio stubs from this project's .proto): paging, existence
checks, endpoints, tokens, and bad requests that must leave no metadata behind."""

from __future__ import annotations

import re
import time
import urllib.request
from typing import Any

import grpc
import pytest
from segmentstore_client.controller_proto import controller_pb2 as pb

from .conftest import Ctl, create_stream, stream_info

pytestmark = pytest.mark.timeout(120)


def _pages(call: Any, make: Any, field: str) -> list[list[Any]]:
    pages, token = [], ""
    for _ in range(100):  # bounded
        reply = call(make(token))
        items = list(getattr(reply, field))
        if not items:
            return pages
        assert reply.continuationToken.token  # a non-empty page carries a token
        pages.append(items)
        token = reply.continuationToken.token
    raise AssertionError("paging did not end")


def test_listing_pages_and_existence(ctl: Ctl) -> None:
    stub = ctl.stub()
    for i in range(130):
        assert (
            stub.createScope(pb.ScopeInfo(scope=f"s{i:03d}")).status == pb.CreateScopeStatus.SUCCESS
        )
    pages = _pages(
        stub.listScopes,
        lambda t: pb.ScopesRequest(continuationToken=pb.ContinuationToken(token=t)),
        "scopes",
    )
    assert [len(p) for p in pages] == [100, 30]
    assert [x for p in pages for x in p] == [f"s{i:03d}" for i in range(130)]
    for i in range(5):
        create_stream(stub, "s000", f"st{i}", 1)
    pages = _pages(
        stub.listStreamsInScope,
        lambda t: pb.StreamsInScopeRequest(
            scope=pb.ScopeInfo(scope="s000"), continuationToken=pb.ContinuationToken(token=t)
        ),
        "streams",
    )
    assert [s.stream for s in [x for p in pages for x in p]] == [f"st{i}" for i in range(5)]
    missing = stub.listStreamsInScope(pb.StreamsInScopeRequest(scope=pb.ScopeInfo(scope="nope")))
    assert missing.status == pb.StreamsInScopeResponse.SCOPE_NOT_FOUND
    assert stub.checkScopeExists(pb.ScopeInfo(scope="s001")).exists
    assert not stub.checkScopeExists(pb.ScopeInfo(scope="zzz")).exists
    assert stub.checkStreamExists(stream_info("s000", "st1")).exists
    assert not stub.checkStreamExists(stream_info("s000", "st9")).exists


def test_endpoints_and_tokens(ctl: Ctl) -> None:
    stub = ctl.stub()
    uri = stub.getURI(pb.SegmentId(streamInfo=stream_info("any", "rg_kvtable"), segmentId=0))
    assert (uri.endpoint, uri.port) == ("127.0.0.1", ctl.server.port)
    servers = stub.getControllerServerList(pb.ServerRequest()).nodeURI
    assert [(n.endpoint, n.port) for n in servers] == [
        ("127.0.0.1", int(ctl.uri.rsplit(":", 1)[1]))
    ]
    assert stub.getDelegationToken(stream_info("a", "b")).delegationToken == ""


def test_advertised_host_and_port_are_what_get_uri_hands_out(ctl_factory: Any) -> None:
    """Pravega's published host and port: a server behind NAT or a port mapping names the
    address clients must use; every segment's ``getURI`` answers with it."""
    c: Ctl = ctl_factory(extra=["--advertised-host", "store.example", "--advertised-port", "4321"])
    uri = c.stub().getURI(pb.SegmentId(streamInfo=stream_info("a", "b"), segmentId=7))
    assert (uri.endpoint, uri.port) == ("store.example", 4321)
    assert c.server.port != 4321


def test_bad_requests_leave_nothing_behind(ctl: Ctl) -> None:
    stub = ctl.stub()
    stub.createScope(pb.ScopeInfo(scope="b"))
    info = stream_info("b", "s")
    for policy in (
        pb.ScalingPolicy(minNumSegments=0),
        pb.ScalingPolicy(minNumSegments=5000),
        pb.ScalingPolicy(
            scaleType=pb.ScalingPolicy.BY_RATE_IN_EVENTS_PER_SEC,
            targetRate=0,
            scaleFactor=2,
            minNumSegments=1,
        ),
    ):
        with pytest.raises(grpc.RpcError) as e:
            stub.createStream(pb.StreamConfig(streamInfo=info, scalingPolicy=policy))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert not stub.checkStreamExists(info).exists
    bad_retention = pb.StreamConfig(
        streamInfo=info,
        scalingPolicy=pb.ScalingPolicy(minNumSegments=1),
        retentionPolicy=pb.RetentionPolicy(
            retentionType=pb.RetentionPolicy.SIZE, retentionParam=-5
        ),
    )
    with pytest.raises(grpc.RpcError):
        stub.createStream(bad_retention)
    assert stub.deleteScope(pb.ScopeInfo(scope="b")).status == pb.DeleteScopeStatus.SUCCESS
    # Status values of the update path.
    cfg = pb.StreamConfig(streamInfo=info, scalingPolicy=pb.ScalingPolicy(minNumSegments=1))
    assert stub.updateStream(cfg).status == pb.UpdateStreamStatus.SCOPE_NOT_FOUND
    create_stream(stub, "b", "s", 1)
    tagged = pb.StreamConfig(
        streamInfo=info, scalingPolicy=pb.ScalingPolicy(minNumSegments=1), tags=pb.Tags(tag=["t1"])
    )
    assert stub.updateStream(tagged).status == pb.UpdateStreamStatus.SUCCESS
    assert list(stub.getStreamConfiguration(info).tags.tag) == ["t1"]
    missing = pb.StreamConfig(
        streamInfo=stream_info("b", "x"), scalingPolicy=pb.ScalingPolicy(minNumSegments=1)
    )
    assert stub.updateStream(missing).status == pb.UpdateStreamStatus.STREAM_NOT_FOUND
    assert stub.sealStream(info).status == pb.UpdateStreamStatus.SUCCESS
    assert stub.updateStream(cfg).status == pb.UpdateStreamStatus.STREAM_SEALED
    assert list(stub.getCurrentSegments(info).segmentRanges) == []  # sealed: no current segments
    with pytest.raises(grpc.RpcError) as e:
        stub.getStreamConfiguration(stream_info("b", "x"))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


def _fsyncs(ctl: Ctl) -> float:
    url = f"http://127.0.0.1:{ctl.server.http_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    m = re.search(r'segmentstore_commit_stage_seconds_count\{stage="fdatasync"\} (\S+)', text)
    assert m, "no fdatasync stage in /metrics"
    return float(m.group(1))


def test_create_stream_waits_for_one_group_commit(ctl: Ctl) -> None:
    """createStream's latency: its segments and its metadata record share one log write and
    one fdatasync (no serial waits), for 1 segment as for 8."""
    stub = ctl.stub()
    stub.createScope(pb.ScopeInfo(scope="g"))
    for segments in (1, 8):
        before = _fsyncs(ctl)
        for i in range(10):
            create_stream(stub, "g", f"s{segments}-{i}", segments)
        assert _fsyncs(ctl) - before == 10
        assert len(stub.getCurrentSegments(stream_info("g", f"s{segments}-9")).segmentRanges) == (
            segments
        )


def _metric(ctl: Ctl, sample: str) -> float:
    url = f"http://127.0.0.1:{ctl.server.http_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(sample + " "):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_every_status_value_the_clients_read(ctl: Ctl) -> None:
    """Each status enum value by its number, straight from the stub (the official client
    turns most of them into True/False/an error), and the metrics that count them."""
    stub = ctl.stub()
    s = pb.CreateScopeStatus
    assert stub.createScope(pb.ScopeInfo(scope="v")).status == s.SUCCESS
    assert stub.createScope(pb.ScopeInfo(scope="v")).status == s.SCOPE_EXISTS
    # Pravega's rule: [A-Za-z0-9.-]+, at most 255 characters; "_" is reserved for internal
    # names, "/" separates scope, stream and segment.
    for bad in ("a/b", "a b", "_x", "", "é", "x" * 256, "a:b"):
        assert stub.createScope(pb.ScopeInfo(scope=bad)).status == s.INVALID_SCOPE_NAME, bad
        cfg = pb.StreamConfig(
            streamInfo=stream_info("v", bad), scalingPolicy=pb.ScalingPolicy(minNumSegments=1)
        )
        assert stub.createStream(cfg).status == pb.CreateStreamStatus.INVALID_STREAM_NAME, bad
    assert stub.createScope(pb.ScopeInfo(scope="A-z.0" + "x" * 250)).status == s.SUCCESS
    assert not stub.checkStreamExists(stream_info("v", "a/b")).exists
    cs = pb.CreateStreamStatus
    cfg = pb.StreamConfig(
        streamInfo=stream_info("v", "s"), scalingPolicy=pb.ScalingPolicy(minNumSegments=2)
    )
    assert stub.createStream(cfg).status == cs.SUCCESS
    assert stub.createStream(cfg).status == cs.STREAM_EXISTS
    nowhere = pb.StreamConfig(
        streamInfo=stream_info("nope", "s"), scalingPolicy=pb.ScalingPolicy(minNumSegments=1)
    )
    assert stub.createStream(nowhere).status == cs.SCOPE_NOT_FOUND
    ds, dsc = pb.DeleteStreamStatus, pb.DeleteScopeStatus
    info = stream_info("v", "s")
    assert stub.deleteStream(info).status == ds.STREAM_NOT_SEALED
    assert stub.deleteStream(stream_info("v", "x")).status == ds.STREAM_NOT_FOUND
    assert stub.sealStream(stream_info("v", "x")).status == pb.UpdateStreamStatus.STREAM_NOT_FOUND
    assert stub.deleteScope(pb.ScopeInfo(scope="v")).status == dsc.SCOPE_NOT_EMPTY
    assert stub.deleteScope(pb.ScopeInfo(scope="nope")).status == dsc.SCOPE_NOT_FOUND
    # Transactions: a ping asking for a lease over the maximum; an unknown transaction.
    txn = stub.createTransaction(pb.CreateTxnRequest(streamInfo=info, lease=10_000))
    assert _metric(ctl, "segmentstore_controller_open_transactions") == 1.0
    ping = pb.PingTxnRequest(streamInfo=info, txnId=txn.txnId, lease=10_000_000)
    assert stub.pingTransaction(ping).status == pb.PingTxnStatus.LEASE_TOO_LARGE
    ping.lease = 10_000
    assert stub.pingTransaction(ping).status == pb.PingTxnStatus.OK
    ghost = pb.PingTxnRequest(
        streamInfo=info, txnId=pb.TxnId(highBits=0, lowBits=987654), lease=1000
    )
    assert stub.pingTransaction(ghost).status == pb.PingTxnStatus.UNKNOWN
    with pytest.raises(grpc.RpcError) as e:
        stub.checkTransactionState(pb.TxnRequest(streamInfo=info, txnId=ghost.txnId))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    abort = pb.TxnRequest(streamInfo=info, txnId=txn.txnId)
    assert stub.abortTransaction(abort).status == pb.TxnStatus.SUCCESS
    assert _metric(ctl, "segmentstore_controller_open_transactions") == 0.0
    # A scale, then both spellings of the successors RPC (Pravega kept its typo).
    assert _metric(ctl, "segmentstore_controller_scale_events_total") == 0.0
    req = pb.ScaleRequest(
        streamInfo=info,
        sealedSegments=[0],
        newKeyRanges=[
            pb.ScaleRequest.KeyRangeEntry(start=0.0, end=0.25),
            pb.ScaleRequest.KeyRangeEntry(start=0.25, end=0.5),
        ],
    )
    assert stub.scale(req).status == pb.ScaleResponse.STARTED
    assert _metric(ctl, "segmentstore_controller_scale_events_total") == 1.0
    assert _metric(ctl, 'segmentstore_controller_stream_segments{stream="v/s"}') == 3.0
    seg0 = pb.SegmentId(streamInfo=info, segmentId=0)
    a = stub.getSegmentsImmediatelyFollowing(seg0)
    b = stub.getSegmentsImmediatlyFollowing(seg0)
    assert a == b
    assert sorted(e.segment.segmentId.segmentId for e in a.segments) == [
        (1 << 32) | 2,
        (1 << 32) | 3,
    ]
    assert all(list(e.value) == [0] for e in a.segments)
    for method, status in (
        ("createScope", "SCOPE_EXISTS"),
        ("createStream", "STREAM_EXISTS"),
        ("deleteStream", "STREAM_NOT_SEALED"),
        ("pingTransaction", "LEASE_TOO_LARGE"),
        ("checkTransactionState", "NOT_FOUND"),
    ):
        sample = f'segmentstore_controller_rpcs_total{{method="{method}",status="{status}"}}'
        assert _metric(ctl, sample) >= 1.0, sample


def test_segments_at_a_time_stamp(ctl: Ctl) -> None:
    """getSegments: 0 is the head; a time stamp gives the epoch current then (offsets 0),
    one before the stream existed gives the head, one after the scale the successors."""
    stub = ctl.stub()
    create_stream(stub, "t", "s", 2)
    info = stream_info("t", "s")
    created = int(time.time() * 1000)
    time.sleep(0.05)
    before_scale = int(time.time() * 1000)
    time.sleep(0.05)
    req = pb.ScaleRequest(
        streamInfo=info,
        sealedSegments=[0, 1],
        newKeyRanges=[pb.ScaleRequest.KeyRangeEntry(start=0.0, end=1.0)],
    )
    assert stub.scale(req).status == pb.ScaleResponse.STARTED
    time.sleep(0.05)
    after_scale = int(time.time() * 1000)

    def at(ms: int) -> dict[int, int]:
        reply = stub.getSegments(pb.GetSegmentsRequest(streamInfo=info, timestamp=ms))
        return {s.segmentId.segmentId: s.offset for s in reply.segments}

    assert at(0) == {0: 0, 1: 0}
    assert at(1) == {0: 0, 1: 0}  # before the stream: its head
    assert at(before_scale) == at(created) == {0: 0, 1: 0}
    assert at(after_scale) == {(1 << 32) | 2: 0}
