"""The controller's gRPC service against a hostile client: a raw stub (the generated one)
sends bad names, bad key ranges, bad stream cuts, bad transactions, forged tokens and
oversized messages. Each gets its status enum or a gRPC error with a clear message, no
half-made metadata (the server restarts and shows the same state) and no traceback in
the server's log."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from controller.conftest import Ctl
from segmentstore_client import sync
from segmentstore_client.controller_proto import controller_pb2 as pb
from segmentstore_client.errors import NoSuchSegment

Range = tuple[float, float]


@pytest.fixture
def stub(mctl: Ctl) -> Iterator[Any]:
    yield mctl.stub()
    assert_clean_log(mctl)


def assert_clean_log(ctl: Ctl) -> None:
    bad = [line for line in ctl.server.log if "Traceback" in line or " ERROR " in line]
    assert not bad, "".join(bad[:20])


def config(scope: str, stream: str, segments: int = 1, **kw: Any) -> Any:
    return pb.StreamConfig(
        streamInfo=pb.StreamInfo(scope=scope, stream=stream),
        scalingPolicy=pb.ScalingPolicy(minNumSegments=segments, **kw),
    )


def status_name(reply: Any) -> str:
    field = reply.DESCRIPTOR.fields_by_name["status"]
    return str(field.enum_type.values_by_number[reply.status].name)


def rpc_error(call: Any, *args: Any) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as e:
        call(*args, timeout=30)
    return e.value


def make_stream(stub: Any, scope: str, stream: str, segments: int) -> Any:
    stub.createScope(pb.ScopeInfo(scope=scope))
    assert status_name(stub.createStream(config(scope, stream, segments))) == "SUCCESS"
    return pb.StreamInfo(scope=scope, stream=stream)


def current(stub: Any, info: Any) -> list[int]:
    return [r.segmentId.segmentId for r in stub.getCurrentSegments(info).segmentRanges]


def list_streams(stub: Any, scope: str) -> list[str]:
    names: list[str] = []
    token = ""
    for _ in range(1000):
        reply = stub.listStreamsInScope(
            pb.StreamsInScopeRequest(
                scope=pb.ScopeInfo(scope=scope), continuationToken=pb.ContinuationToken(token=token)
            )
        )
        if not reply.streams:
            break
        names += [s.stream for s in reply.streams]
        token = reply.continuationToken.token
    return names


BAD_NAMES = ["", "x" * 10240, "a/b", "a\0b", "a\nb", "é", "a b", "_RGg", "_system", "_relay", "_x"]


def test_bad_names_are_refused_and_nothing_is_made(stub: Any) -> None:
    for name in BAD_NAMES:
        reply = stub.createScope(pb.ScopeInfo(scope=name))
        assert status_name(reply) == "INVALID_SCOPE_NAME", repr(name[:20])
    make_stream(stub, "names", "ok", 1)
    for name in BAD_NAMES:
        reply = stub.createStream(config("names", name))
        assert status_name(reply) == "INVALID_STREAM_NAME", repr(name[:20])
    assert list_streams(stub, "names") == ["ok"]
    scopes = stub.listScopes(pb.ScopesRequest()).scopes
    assert not set(BAD_NAMES) & set(scopes)


def test_bad_stream_configs_get_invalid_argument(stub: Any, mctl: Ctl) -> None:
    stub.createScope(pb.ScopeInfo(scope="cfg"))
    cases = {
        "minNumSegments must be 1..1024, not 100000": config("cfg", "a", 100_000),
        "minNumSegments must be 1..1024, not -1": config("cfg", "b", -1),
        "scaleFactor > 0": config("cfg", "c", 1, scaleType=1, targetRate=10, scaleFactor=-2),
        "unknown scaling policy type 7": config("cfg", "d", 1, scaleType=7),
    }
    many = config("cfg", "e")
    many.tags.tag.extend(f"t{i}" for i in range(129))
    long = config("cfg", "f")
    long.tags.tag.append("t" * 257)
    huge = config("cfg", "g")  # 3.9 MB of tags: under gRPC's limit, over a metadata value's
    huge.tags.tag.extend(["t" * 1000] * 3900)
    for msg in (many, long, huge):
        cases[f"at most 128 tags ({msg.streamInfo.stream})"] = msg
    for expected, msg in cases.items():
        e = rpc_error(stub.createStream, msg)
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, expected
        assert expected.split(" (")[0] in (e.details() or ""), expected
    assert list_streams(stub, "cfg") == []
    # no orphan segment of a refused stream
    with sync.connect(mctl.server.endpoint) as client:
        for name in "abcdefg":
            with pytest.raises(NoSuchSegment):
                client.segment_info(f"cfg/{name}/0.#epoch.0")
    ok = config("cfg", "tagged")
    ok.tags.tag.extend(["t" * 256] * 128)
    assert status_name(stub.createStream(ok)) == "SUCCESS"
    assert len(stub.getStreamConfiguration(ok.streamInfo).tags.tag) == 128


@pytest.mark.parametrize(
    ("what", "ranges", "sealed"),
    [
        ("overlap", [(0.0, 0.6), (0.5, 1.0)], [0, 1]),
        ("gap", [(0.0, 0.4), (0.5, 1.0)], [0, 1]),
        ("outside", [(-0.5, 0.5), (0.5, 1.5)], [0, 1]),
        ("nan", [(0.0, math.nan), (math.nan, 1.0)], [0, 1]),
        ("reversed", [(1.0, 0.5), (0.5, 0.0)], [0, 1]),
        ("infinite", [(0.0, math.inf)], [0, 1]),
        ("empty ranges", [], [0, 1]),
        ("no sealed", [(0.0, 1.0)], []),
        ("unknown sealed", [(0.0, 1.0)], [0, 1, 99]),
        ("duplicate sealed", [(0.0, 0.5), (0.5, 1.0)], [0, 0, 1]),
        ("half sealed", [(0.0, 1.0)], [0]),
    ],
)
def test_bad_scales_are_refused_and_change_nothing(
    stub: Any, what: str, ranges: list[Range], sealed: list[int]
) -> None:
    info = make_stream(stub, "scale", what.replace(" ", "-"), 2)
    req = pb.ScaleRequest(
        streamInfo=info,
        sealedSegments=sealed,
        newKeyRanges=[pb.ScaleRequest.KeyRangeEntry(start=a, end=b) for a, b in ranges],
    )
    assert status_name(stub.scale(req)) == "PRECONDITION_FAILED"
    assert current(stub, info) == [0, 1]
    assert len(stub.getEpochSegments(pb.GetEpochSegmentsRequest(streamInfo=info)).segmentRanges)
    e = rpc_error(stub.getEpochSegments, pb.GetEpochSegmentsRequest(streamInfo=info, epoch=1))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_scale_of_a_sealed_or_deleted_stream(stub: Any) -> None:
    info = make_stream(stub, "gone", "s", 2)
    req = pb.ScaleRequest(
        streamInfo=info,
        sealedSegments=[0, 1],
        newKeyRanges=[pb.ScaleRequest.KeyRangeEntry(start=0.0, end=1.0)],
    )
    assert status_name(stub.sealStream(info)) == "SUCCESS"
    assert status_name(stub.scale(req)) == "PRECONDITION_FAILED"
    assert status_name(stub.deleteStream(info)) == "SUCCESS"
    assert status_name(stub.scale(req)) == "PRECONDITION_FAILED"
    assert status_name(stub.createStream(config("gone", "s", 1))) == "SUCCESS"
    assert current(stub, info) == [0]  # a new stream, nothing of the old one


def test_hostile_stream_cuts(stub: Any) -> None:
    info = make_stream(stub, "cuts", "s", 2)
    make_stream(stub, "cuts", "other", 3)
    bad = {
        "negative": {0: -5, 1: 0},
        "past the tail": {0: 10**12, 1: 0},
        "half the key space": {0: 0},
        "another stream's segment": {2: 0},
        "unknown segment": {0: 0, 1: 0, 77: 0},
    }
    for what, cut in bad.items():
        e = rpc_error(stub.truncateStream, pb.StreamCut(streamInfo=info, cut=cut))
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, what
        if what != "past the tail":  # offsets are not part of a cut's shape
            valid = stub.isStreamCutValid(pb.StreamCut(streamInfo=info, cut=cut)).response
            assert not valid, what
            between = pb.StreamCutRange(streamInfo=info)
            between.to.update(cut)
            e = rpc_error(stub.getSegmentsBetween, between)
            assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, what
    head = stub.getSegments(pb.GetSegmentsRequest(streamInfo=info, timestamp=0))
    assert {loc.segmentId.segmentId: loc.offset for loc in head.segments} == {0: 0, 1: 0}


def test_hostile_transactions(stub: Any) -> None:
    info = make_stream(stub, "txn", "s", 2)
    other = make_stream(stub, "txn", "other", 2)

    def begin(lease: int = 10_000) -> Any:
        return stub.createTransaction(pb.CreateTxnRequest(streamInfo=info, lease=lease)).txnId

    def req(txn: Any, stream: Any = info) -> Any:
        return pb.TxnRequest(streamInfo=stream, txnId=txn)

    for lease in (0, -1, 2**62):
        e = rpc_error(stub.createTransaction, pb.CreateTxnRequest(streamInfo=info, lease=lease))
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "lease" in (e.details() or "")
    t = begin()
    for lease in (2**62, -1):
        ping = pb.PingTxnRequest(streamInfo=info, txnId=t, lease=lease)
        assert status_name(stub.pingTransaction(ping)) == "LEASE_TOO_LARGE"
    assert status_name(stub.commitTransaction(req(t, other))) == "TRANSACTION_NOT_FOUND"
    assert status_name(stub.abortTransaction(req(t, other))) == "TRANSACTION_NOT_FOUND"
    e = rpc_error(stub.checkTransactionState, req(t, other))
    assert e.code() == grpc.StatusCode.NOT_FOUND
    forged = pb.TxnId(highBits=-1, lowBits=-1)
    assert status_name(stub.commitTransaction(req(forged))) == "TRANSACTION_NOT_FOUND"
    assert status_name(stub.abortTransaction(req(t))) == "SUCCESS"
    assert status_name(stub.commitTransaction(req(t))) == "FAILURE"  # commit after abort
    t2 = begin()
    assert status_name(stub.commitTransaction(req(t2))) == "SUCCESS"
    assert status_name(stub.commitTransaction(req(t2))) == "SUCCESS"  # idempotent
    assert status_name(stub.abortTransaction(req(t2))) == "FAILURE"  # abort after commit
    state = stub.checkTransactionState(req(t2))
    assert pb.TxnState.State.Name(state.state) == "COMMITTED"
    assert status_name(stub.sealStream(info)) == "SUCCESS"
    e = rpc_error(stub.createTransaction, pb.CreateTxnRequest(streamInfo=info, lease=1000))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_forged_list_tokens_and_messages(stub: Any, mctl: Ctl) -> None:
    for i in range(5):
        make_stream(stub, "list", f"l{i}", 1)
    make_stream(stub, "list2", "zz", 1)

    def page(scope: str, token: str) -> list[str]:
        reply = stub.listStreamsInScope(
            pb.StreamsInScopeRequest(
                scope=pb.ScopeInfo(scope=scope), continuationToken=pb.ContinuationToken(token=token)
            )
        )
        return [s.stream for s in reply.streams]

    assert page("list", "\uffff" * 1000) == []
    assert page("list", "zz") == []  # list2's token: nothing of list2 leaks
    assert page("list", "l2") == ["l3", "l4"]
    scopes = pb.ScopesRequest(continuationToken=pb.ContinuationToken(token="x" * 100_000))
    assert list(stub.listScopes(scopes).scopes) == []
    # a message over gRPC's 4 MiB limit is refused by gRPC itself, and nothing is made
    big = config("list", "big")
    big.tags.tag.extend(["t" * 1000] * 4300)
    assert rpc_error(stub.createStream, big).code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    # bytes that are not a message (or not UTF-8 in a string field): an error, no crash
    channel = grpc.insecure_channel(mctl.uri.removeprefix("tcp://"))
    raw = channel.unary_unary(
        "/io.pravega.controller.stream.api.grpc.v1.ControllerService/createScope"
    )
    for junk in (b"\x0a\x03\xff\xfe\xfd", b"\xff\xff\xff\xff"):
        e = rpc_error(raw, junk)
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "not a valid request message" in (e.details() or "")
    channel.close()
    assert "big" not in list_streams(stub, "list")
    assert list_streams(stub, "list") == [f"l{i}" for i in range(5)]


def test_scale_history_is_bounded_and_the_server_restarts(ctl: Ctl) -> None:
    """Before the guard, the 8th scale to 1,024 segments wrote a pending record it could
    not finish (the record outgrew a metadata value) and the server never started again."""
    stub = ctl.stub()
    info = make_stream(stub, "hist", "s", 1)
    n = 1024
    ranges = [
        pb.ScaleRequest.KeyRangeEntry(start=k / n, end=1.0 if k == n - 1 else (k + 1) / n)
        for k in range(n)
    ]
    refused = None
    for i in range(10):
        req = pb.ScaleRequest(streamInfo=info, sealedSegments=current(stub, info))
        req.newKeyRanges.extend(ranges)
        try:
            assert status_name(stub.scale(req, timeout=60)) == "STARTED"
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "cannot scale" in (e.details() or "")
            refused = i
            break
    assert refused is not None and refused >= 5
    before = current(stub, info)
    assert len(before) == n
    ctl.server.stop()
    ctl.restart()
    stub = ctl.stub()
    assert current(stub, info) == before
    epochs = pb.GetEpochSegmentsRequest(streamInfo=info, epoch=refused)
    assert len(stub.getEpochSegments(epochs).segmentRanges) == n
    assert_clean_log(ctl)


def test_a_thousand_concurrent_creates(ctl: Ctl) -> None:
    stub = ctl.stub()
    stub.createScope(pb.ScopeInfo(scope="many"))
    futures = [stub.createStream.future(config("many", f"s{i}"), timeout=120) for i in range(1000)]
    got = Counter(status_name(f.result()) for f in futures)
    assert got == {"SUCCESS": 1000}
    again = [stub.createStream.future(config("many", f"s{i}"), timeout=120) for i in range(50)]
    assert {status_name(f.result()) for f in again} == {"STREAM_EXISTS"}
    names = sorted(list_streams(stub, "many"))
    assert len(names) == 1000
    ctl.server.stop()
    ctl.restart()
    assert sorted(list_streams(ctl.stub(), "many")) == names
    assert_clean_log(ctl)


def test_open_transactions_are_capped_per_stream(server_factory: Any) -> None:
    server = server_factory(
        extra_args=["--controller-port", "0"],
        env={"SEGMENTSTORE_CONTROLLER_MAX_OPEN_TXNS": "20"},
    )
    server.start()
    ctl = Ctl(server)
    stub = ctl.stub()
    info = make_stream(stub, "cap", "s", 2)
    other = make_stream(stub, "cap", "other", 1)

    def begin(stream: Any) -> Any:
        return stub.createTransaction(pb.CreateTxnRequest(streamInfo=stream, lease=60_000))

    txns = [begin(info).txnId for _ in range(20)]
    e = rpc_error(stub.createTransaction, pb.CreateTxnRequest(streamInfo=info, lease=60_000))
    assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "20 open transactions" in (e.details() or "")
    begin(other)  # the cap is per stream
    req = pb.TxnRequest(streamInfo=info, txnId=txns[0])
    assert status_name(stub.abortTransaction(req)) == "SUCCESS"
    begin(info)  # room again
    ctl.server.stop()
    ctl.restart()
    e = rpc_error(ctl.stub().createTransaction, pb.CreateTxnRequest(streamInfo=info, lease=1000))
    assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # open ones survive the restart
    assert_clean_log(ctl)


def test_oversized_reader_group_configs_are_refused(stub: Any) -> None:
    """A 900 KB configuration used to fail as INTERNAL after the group's internal stream
    was made (its record, in base64, outgrew a metadata value)."""
    stub.createScope(pb.ScopeInfo(scope="rg"))
    big = pb.ReaderGroupConfiguration(scope="rg", readerGroupName="g", readerGroupId="x" * 900_000)
    e = rpc_error(stub.createReaderGroup, big)
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "over the limit" in (e.details() or "")
    internal = pb.StreamInfo(scope="rg", stream="_RGg")
    assert not stub.checkStreamExists(internal).exists  # nothing half-made
    ok = pb.ReaderGroupConfiguration(scope="rg", readerGroupName="g")
    reply = stub.createReaderGroup(ok)
    assert status_name(reply) == "SUCCESS" and stub.checkStreamExists(internal).exists
    big.generation = 0
    e = rpc_error(stub.updateReaderGroup, big)
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
    got = stub.getReaderGroupConfig(pb.ReaderGroupInfo(scope="rg", readerGroup="g"))
    assert status_name(got) == "SUCCESS" and got.config.generation == 0
