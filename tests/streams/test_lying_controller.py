"""The stream SDK against a controller that lies (issue 16, trust): a gRPC server in the
test process, on the project's generated stubs, answers what the test tells it, while the
segment store is a real ``segmentstore serve``. Key ranges that do not tile [0, 1) (gap,
overlap, NaN, outside [0, 1)), ids that are not segment ids, successors that form a cycle,
go back an epoch, forget their predecessor or leave part of a range to nobody, an empty or
gapped transaction: the writer, the transaction and the reader group fail with one
StreamError INVALID_REPLY and write or read nothing on the strength of it. A reply after
the client's timeout is a Timeout; 5,000 segments that tile the key space are used."""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
import segmentstore_client as sc
from segmentstore_client.controller_proto import controller_pb2 as pb
from segmentstore_client.controller_proto import controller_pb2_grpc as pb_grpc
from segmentstore_client.errors import Timeout
from segmentstore_client.streams import StreamCut, StreamError
from segmentstore_client.streams.controller_client import segment_name
from segmentstore_client.streams.routing import key_hash

from segmentstore.server.launcher import ServerProcess

INVALID_REPLY = "INVALID_REPLY"  # StreamError.status of a reply that cannot be true
Range = tuple[int, float, float]  # segment id, low, high
EPOCH1 = 1 << 32


class Liar(pb_grpc.ControllerServiceServicer):  # type: ignore[misc]
    """Answers the stream calls the SDK makes with whatever the test set."""

    def __init__(self) -> None:
        self.current: list[Range] = [(0, 0.0, 1.0)]
        self.txn: list[Range] = [(0, 0.0, 1.0)]
        self.following: dict[int, list[tuple[Range, list[int]]]] = {}
        self.delay = 0.0
        self.calls = 0
        self.between_extra: list[int] = []

    @staticmethod
    def _range(scope: str, stream: str, r: Range) -> Any:
        sid = pb.SegmentId(streamInfo=pb.StreamInfo(scope=scope, stream=stream), segmentId=r[0])
        return pb.SegmentRange(segmentId=sid, minKey=r[1], maxKey=r[2])

    async def checkStreamExists(self, request: Any, context: Any) -> Any:
        return pb.ExistsResponse(exists=True)

    async def checkScopeExists(self, request: Any, context: Any) -> Any:
        return pb.ExistsResponse(exists=True)

    async def getCurrentSegments(self, request: Any, context: Any) -> Any:
        self.calls += 1
        await asyncio.sleep(self.delay)
        return pb.SegmentRanges(
            segmentRanges=[self._range(request.scope, request.stream, r) for r in self.current]
        )

    async def getSegmentsImmediatelyFollowing(self, request: Any, context: Any) -> Any:
        self.calls += 1
        info = request.streamInfo
        entries = [
            pb.SuccessorResponse.SegmentEntry(
                segment=self._range(info.scope, info.stream, r), value=preds
            )
            for r, preds in self.following.get(request.segmentId, [])
        ]
        return pb.SuccessorResponse(segments=entries)

    async def getSegments(self, request: Any, context: Any) -> Any:
        info = request.streamInfo
        sid = pb.SegmentId(streamInfo=info, segmentId=self.current[0][0])
        return pb.SegmentsAtTime(segments=[pb.SegmentsAtTime.SegmentLocation(segmentId=sid)])

    async def getEpochSegments(self, request: Any, context: Any) -> Any:
        if request.epoch > 0:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "no such epoch")
        return await self.getCurrentSegments(request.streamInfo, context)

    async def getSegmentsBetween(self, request: Any, context: Any) -> Any:
        info = request.streamInfo
        ids = [r[0] for r in self.current] + self.between_extra
        return pb.StreamCutRangeResponse(
            segments=[pb.SegmentId(streamInfo=info, segmentId=s) for s in ids]
        )

    async def createTransaction(self, request: Any, context: Any) -> Any:
        info = request.streamInfo
        return pb.CreateTxnResponse(
            txnId=pb.TxnId(highBits=1, lowBits=2),
            activeSegments=[self._range(info.scope, info.stream, r) for r in self.txn],
        )


@pytest.fixture
async def liar() -> AsyncIterator[tuple[Liar, str]]:
    servicer = Liar()
    server = grpc.aio.server()
    pb_grpc.add_ControllerServiceServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield servicer, f"tcp://127.0.0.1:{port}"
    finally:
        await server.stop(grace=None)


@pytest.fixture
async def lied_to(
    module_server: ServerProcess, liar: tuple[Liar, str]
) -> AsyncIterator[tuple[Liar, sc.Client]]:
    servicer, uri = liar
    async with sc.connect(module_server.endpoint, controller=uri, request_timeout=5.0) as c:
        yield servicer, c


def unique(prefix: str) -> str:
    """A stream name of its own in the module's store."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}/s"


async def make_segments(client: sc.Client, stream: str, ids: list[int], seal: bool = False) -> None:
    scope, name = stream.split("/")
    for sid in ids:
        seg = segment_name(scope, name, sid)
        await client.create_segment(seg)
        if seal:
            await client.seal(seg)


async def lengths(client: sc.Client, stream: str, ids: list[int]) -> list[int]:
    scope, name = stream.split("/")
    return [(await client.segment_info(segment_name(scope, name, s))).length for s in ids]


BAD_CURRENT = {
    "gap": [(0, 0.0, 0.4), (1, 0.6, 1.0)],
    "overlap": [(0, 0.0, 0.6), (1, 0.4, 1.0)],
    "nan": [(0, 0.0, math.nan), (1, math.nan, 1.0)],
    "outside": [(0, -0.5, 0.5), (1, 0.5, 1.0)],
    "past-one": [(0, 0.0, 0.5), (1, 0.5, 1.5)],
    "reversed": [(0, 0.5, 0.0), (1, 0.5, 1.0)],
    "short": [(0, 0.0, 0.5), (1, 0.5, 0.9)],
    "negative-id": [(0, 0.0, 0.5), (-1, 0.5, 1.0)],
    "twice": [(0, 0.0, 0.5), (0, 0.5, 1.0)],
}


@pytest.mark.parametrize("lie", sorted(BAD_CURRENT))
async def test_current_segments_that_do_not_tile_the_key_space(
    lied_to: tuple[Liar, sc.Client], lie: str
) -> None:
    servicer, client = lied_to
    servicer.current = BAD_CURRENT[lie]
    stream = unique("l")
    await make_segments(client, stream, [0, 1])
    w = client.stream_writer(stream)
    with pytest.raises(StreamError) as err:
        for i in range(20):
            await w.write(f"e{i}".encode(), routing_key=f"k{i}")
    assert err.value.status == INVALID_REPLY, err.value
    assert "getCurrentSegments" in str(err.value)
    w.abort()
    assert await lengths(client, stream, [0, 1]) == [0, 0]  # nothing was routed by it


BAD_FOLLOWING: dict[str, list[tuple[Range, list[int]]]] = {
    "itself": [((0, 0.0, 1.0), [0])],  # a cycle: the sealed segment follows itself
    "earlier-epoch": [((1, 0.0, 1.0), [0])],
    "not-its-predecessor": [((EPOCH1, 0.0, 1.0), [7])],
    "half-covered": [((EPOCH1, 0.0, 0.5), [0])],
    "nan": [((EPOCH1, math.nan, 1.0), [0])],
}


@pytest.mark.parametrize("lie", sorted(BAD_FOLLOWING))
async def test_successors_that_cannot_be(lied_to: tuple[Liar, sc.Client], lie: str) -> None:
    servicer, client = lied_to
    servicer.following = {0: BAD_FOLLOWING[lie]}
    stream = unique("f")
    await make_segments(client, stream, [0], seal=True)
    await make_segments(client, stream, [1, EPOCH1])
    w = client.stream_writer(stream)
    with pytest.raises(StreamError) as err:
        async with asyncio.timeout(10):  # never round a cycle
            await w.write(b"e", routing_key="k")
            await w.flush()  # the store says sealed: the writer asks for successors
    assert err.value.status == INVALID_REPLY, err.value
    assert servicer.calls < 10
    w.abort()
    assert await lengths(client, stream, [0, 1, EPOCH1]) == [0, 0, 0]


async def test_transaction_ranges_that_do_not_tile(lied_to: tuple[Liar, sc.Client]) -> None:
    servicer, client = lied_to
    w = client.stream_writer("t/s")
    for ranges in ([], [(0, 0.0, 0.4), (1, 0.6, 1.0)]):
        servicer.txn = ranges
        with pytest.raises(StreamError) as err:
            await w.begin()
        assert err.value.status == INVALID_REPLY
    w.abort()


async def test_a_reader_is_not_sent_back_to_an_earlier_segment(
    lied_to: tuple[Liar, sc.Client],
) -> None:
    """Segment 0 is read to its sealed end; the liar names segment 1 of the same epoch
    (a segment of another key range, read already or by another reader) as its successor."""
    servicer, client = lied_to
    servicer.following = {0: [((1, 0.0, 1.0), [0])]}
    stream = unique("r")
    scope, name = stream.split("/")
    await make_segments(client, stream, [0, 1])
    for seg in (segment_name(scope, name, 0), segment_name(scope, name, 1)):
        async with client.writer(seg) as w:
            await w.write_many([f"{seg}:{i}".encode() for i in range(3)])
        await client.seal(seg)
    group = client.reader_group(f"{scope}/g", [stream], start=StreamCut(stream, {0: 0}))
    reader = group.reader("r1")
    got: list[str] = []
    with pytest.raises(StreamError) as err:
        async with asyncio.timeout(10):
            async for ev in reader.events(idle_timeout=3):
                got.append(ev.data.decode())
    assert err.value.status == INVALID_REPLY
    assert got == [f"{segment_name(scope, name, 0)}:{i}" for i in range(3)]


async def test_a_reply_after_the_timeout_is_a_timeout(
    module_server: ServerProcess, liar: tuple[Liar, str]
) -> None:
    servicer, uri = liar
    servicer.delay = 3.0
    async with sc.connect(module_server.endpoint, controller=uri, request_timeout=0.5) as client:
        w = client.stream_writer("slow/s")
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(Timeout, match="getCurrentSegments timed out"):
            await w.write(b"e")
        assert loop.time() - t0 < 2.5
        w.abort()


async def test_five_thousand_segments_that_tile_are_used(
    lied_to: tuple[Liar, sc.Client],
) -> None:
    servicer, client = lied_to
    n = 5000
    servicer.current = [(i, i / n, (i + 1) / n if i < n - 1 else 1.0) for i in range(n)]
    keys = [f"key-{i}" for i in range(20)]
    want = {k: min(int(key_hash(k) * n), n - 1) for k in keys}
    for k, sid in want.items():  # the boundaries are i / n: the hash's own segment
        lo, hi = servicer.current[sid][1:]
        assert lo <= key_hash(k) < hi or (key_hash(k) == hi and sid == n - 1)
    stream = unique("m")
    await make_segments(client, stream, sorted(set(want.values())))
    async with client.stream_writer(stream) as w:
        for k in keys:
            await w.write(k.encode(), routing_key=k)
    for k, sid in want.items():
        async for ev in client.reader(segment_name(*stream.split("/"), sid)):
            if ev.data == k.encode():
                break
        else:
            raise AssertionError(f"{k} is not in segment {sid}")


async def test_stream_info_with_a_segment_of_a_newer_epoch(lied_to: tuple[Liar, sc.Client]) -> None:
    """getSegmentsBetween names a segment none of the epochs read before it has (as after
    a scale between the two calls): the snapshot leaves it out (it was a KeyError)."""
    servicer, client = lied_to
    servicer.between_extra = [EPOCH1]
    stream = unique("i")
    await make_segments(client, stream, [0, EPOCH1])
    info = await client.stream_info(stream)
    assert list(info.segments) == [0]
    assert [r.segment for e in info.epochs for r in e] == [0]
